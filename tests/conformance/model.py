"""The model every conformance case talks to: the scripted OpenAI-compatible server with
one responder that answers by what the person said.

A case says something carrying a unique *marker* (:func:`marker`) and may script the
answers its turn gets (:meth:`KitModel.script`): each request whose newest user message
carries the marker takes the next step (a tool call, then the text after the tool's
result); a marker with nothing scripted, or nothing left, gets ``echo: <what was said>``.
So cases share one daemon and one server without taking each other's steps, and every
request is kept by marker (what tools were offered, what a file said).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import defaultdict, deque
from typing import Any

from netclaw.messages import unmarked
from tests.fakes._scripted_server import request_messages, said, without_speaker
from tests.fakes.scripted_openai import Reply, Step

_MARKER = re.compile(r"\bk\d{4}[a-z]{2}\b")
_counter = itertools.count(1)


def marker(tag: str = "kt") -> str:
    """A word no other case says (``k0007ab``): what the kit model routes by."""
    return f"k{next(_counter):04d}{tag[:2].lower():a<2}"


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def last_user_text(body: dict[str, Any]) -> str:
    """What the newest user message said: without netclaw's context tail, the speaker tag
    (``[Alice] ``) or the webhook's untrusted-content marker."""
    for message in reversed(request_messages(body)):
        if message.get("role") != "user":
            continue
        text = said(text_of(message.get("content")))
        if text:
            return unmarked(without_speaker(text)).strip()
    return ""


def offered_tools(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


class KitModel:
    """The responder (``ScriptedOpenAIThread.set_responder``); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[str, deque[Step]] = defaultdict(deque)
        self._requests: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._arrived: dict[str, threading.Event] = defaultdict(threading.Event)

    def script(self, mark: str, *steps: Step) -> None:
        """The answers of the requests whose newest user message carries ``mark``, in order."""
        with self._lock:
            self._steps[mark].extend(steps)

    def requests(self, mark: str) -> list[dict[str, Any]]:
        """Every request (its JSON body) whose newest user message carried ``mark``."""
        with self._lock:
            return list(self._requests[mark])

    def wait_request(self, mark: str, timeout: float = 15.0) -> bool:
        """Wait until a request for ``mark`` has arrived."""
        return self._arrived[mark].wait(timeout)

    def __call__(self, body: dict[str, Any]) -> Step:
        text = last_user_text(body)
        found = _MARKER.search(text)
        mark = found.group(0) if found else ""
        with self._lock:
            self._requests[mark].append(json.loads(json.dumps(body)))
            steps = self._steps.get(mark)
            step = steps.popleft() if steps else None
            self._arrived[mark].set()
        return step if step is not None else Reply(text=f"echo: {text}")
