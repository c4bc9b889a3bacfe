"""A scripted model for sub-agent tests and benches: one responder answering a parent and
its children by what each request says, so it holds however the daemon's calls
interleave — and after a crash, when turns are resumed and calls asked again.

- A user message ``SPAWN <n> <tag> [wait]`` (the parent) → one ``spawn_agent`` call per
  child, tasks ``TASK <tag>-<i> rounds=<r>``; after the round's results → ``spawned <tag>``.
- A session whose first message is ``TASK <name> rounds=<r>`` (a child) → ``<r>`` tool
  rounds of ``current_time``, then ``RESULT <name>``.
- A report of a child (``[netclaw: report from your sub-agent …]``) → ``ACK <child>: <answer>``
  (the answer without its untrusted-content label).
- Anything else: an echo.

Optional ``child_delay_s``/``parent_delay_s``: how long each answer waits before it starts
(a crash test kills the daemon while they wait).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from netclaw.security.trust import unlabel
from tests.fakes._scripted_server import request_messages
from tests.fakes.scripted_openai import Reply, ToolCallSpec, said

_SPAWN = re.compile(r"SPAWN (\d+) (\S+)( wait)?( rounds=(\d+))?")
_TASK = re.compile(r"TASK (\S+) rounds=(\d+)")
_REPORT = re.compile(r"\[netclaw: report from your sub-agent (\S+) \(its turn (\d+)")


def _text(message: dict[str, Any]) -> str:
    """What a message says (a user message without the turn's tail netclaw adds to it)."""
    content = message.get("content")
    if isinstance(content, str):
        return said(content)
    if isinstance(content, list):  # content parts
        return said("".join(p.get("text", "") for p in content if isinstance(p, dict)))
    return ""


@dataclass
class FamilyScript:
    rounds: int = 1  # tool rounds a child does when its task does not say
    child_delay_s: tuple[float, float] = (0.0, 0.0)  # each child answer waits uniform(a, b)
    parent_delay_s: tuple[float, float] = (0.0, 0.0)
    seed: int | None = None
    calls: list[str] = field(default_factory=list)  # what each request was taken for
    _random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = [m for m in request_messages(body) if m.get("role") != "system"]
        users = [m for m in messages if m.get("role") == "user"]
        first = _text(users[0]) if users else ""
        task = _TASK.search(first)
        if task is not None:
            return self._child(messages, task.group(1), int(task.group(2)))
        return self._parent(messages)

    def _child(self, messages: list[dict[str, Any]], name: str, rounds: int) -> Reply:
        # Tool results since the last user message: the rounds done in this turn so far.
        done = 0
        for m in reversed(messages):
            if m.get("role") == "user":
                break
            if m.get("role") == "tool":
                done += 1
        delay = self._random.uniform(*self.child_delay_s)
        if done < rounds:
            self.calls.append(f"child {name} round {done + 1}")
            return Reply(tool_calls=[ToolCallSpec("current_time", {})], delay_s=delay)
        self.calls.append(f"child {name} result")
        return Reply(text=f"RESULT {name}", delay_s=delay)

    def _parent(self, messages: list[dict[str, Any]]) -> Reply:
        delay = self._random.uniform(*self.parent_delay_s)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            tag = self._last_spawn_tag(messages)
            self.calls.append(f"parent spawned {tag}")
            return Reply(text=f"spawned {tag}", delay_s=delay)
        text = _text(last)
        spawn = _SPAWN.search(text)
        if spawn is not None:
            count, tag, wait = int(spawn.group(1)), spawn.group(2), bool(spawn.group(3))
            rounds = int(spawn.group(5)) if spawn.group(5) else self.rounds
            calls = [
                ToolCallSpec("spawn_agent", {"task": f"TASK {tag}-{i} rounds={rounds}", "wait": wait})
                for i in range(1, count + 1)
            ]
            self.calls.append(f"parent spawns {tag}")
            return Reply(tool_calls=calls, delay_s=delay)
        report = _REPORT.search(text)
        if report is not None:
            answer = unlabel(text.split("\n", 1)[1]) if "\n" in text else text
            self.calls.append(f"parent acks {report.group(1)}")
            return Reply(text=f"ACK {report.group(1)}: {answer}", delay_s=delay)
        self.calls.append("echo")
        return Reply(text=f"echo: {text}", delay_s=delay)

    @staticmethod
    def _last_spawn_tag(messages: list[dict[str, Any]]) -> str:
        for m in reversed(messages):
            for call in m.get("tool_calls") or ():
                args = json.loads(call.get("function", {}).get("arguments") or "{}")
                found = _TASK.search(str(args.get("task", "")))
                if found is not None:
                    return found.group(1).rsplit("-", 1)[0]
        return "?"
