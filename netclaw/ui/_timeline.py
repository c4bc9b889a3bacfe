"""A turn's timeline, from what the journal records (pure): where the time of each recent
turn went, as a waterfall — no collector needed (traces, docs/telemetry.md, are the
detailed view).

What the journal gives, and what each phase is made of:

- the message's arrival (its ``ts``, stamped at admission) and ``TurnStarted``'s write:
  ``queue``, the wait behind the turn before it;
- a round (``StepRecorded``): the model call from the end of what came before to the
  answer that asked for tools (the assistant message's ``ts``), then ``tools`` until the
  last result (the results' ``ts``);
- ``ModelSwitched``: the call to the model that failed, up to the switch to its fallback;
- ``ApprovalRequested`` / ``ApprovalDecided``: the wait for each decision;
- ``SessionCompacted`` during a turn: the compaction;
- ``TurnRecorded``: the last model call, to the reply (or to the record of a turn that
  failed, timed out or was cancelled).

Between phases is the session's own work (journal writes, building the prompt), drawn as
a gap. A turn still running is drawn up to now, with the approvals it still waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from markupsafe import Markup, escape

WIDTH = 640
LABEL_WIDTH = 230
ROW_HEIGHT = 24
DURATION_WIDTH = 70
KINDS = ("queue", "model", "model_failed", "tools", "approval", "compaction", "ended")


class Recorded(Protocol):
    """A journal event as the gateway reads it (``netclaw.gateway.Recorded``)."""

    @property
    def kind(self) -> str: ...  # the event's type name
    @property
    def data(self) -> Mapping[str, Any]: ...  # its payload
    @property
    def at(self) -> float: ...  # when it was written


@dataclass(frozen=True, slots=True)
class Phase:
    kind: str  # one of KINDS: the bar's colour
    label: str
    start: float  # seconds after the message arrived
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Timeline:
    turn: int
    status: str  # completed, failed, timed_out, interrupted, cancelled; "running" until recorded
    arrived: float  # unix time the message arrived
    total: float  # seconds from its arrival to the turn's record (or its last record so far)
    phases: tuple[Phase, ...]

    @property
    def slowest(self) -> Phase | None:
        return max(self.phases, key=lambda p: p.seconds, default=None)

    def svg(self) -> Markup:
        """The waterfall: one row per phase, its bar where it lies in the turn."""
        rows = max(len(self.phases), 1)
        height = rows * ROW_HEIGHT + 6
        room = WIDTH - LABEL_WIDTH - DURATION_WIDTH
        scale = self.total if self.total > 0 else 1.0
        title = f"Turn {self.turn}: {seconds(self.total)}"
        parts = [
            f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-label="{escape(title)}" preserveAspectRatio="xMinYMin meet">',
        ]
        for i, phase in enumerate(self.phases):
            y = 3 + i * ROW_HEIGHT
            label = phase.label if len(phase.label) <= 34 else phase.label[:33] + "…"
            x = LABEL_WIDTH + room * min(phase.start / scale, 1.0)
            width = max(room * phase.seconds / scale, 1.5)
            parts.append(f'<text class="label" x="0" y="{y + 15}">{escape(label)}</text>')
            parts.append(
                f'<rect class="t-{phase.kind}" x="{x:.1f}" y="{y + 3}" width="{width:.1f}" '
                f'height="{ROW_HEIGHT - 8}"><title>{escape(phase.label)}: {seconds(phase.seconds)}</title></rect>'
            )
            parts.append(
                f'<text class="value" x="{WIDTH}" y="{y + 15}" text-anchor="end">{seconds(phase.seconds)}</text>'
            )
        parts.append("</svg>")
        return Markup("".join(parts))


def seconds(value: float) -> str:
    """``0.42 s``, ``14.2 s``, ``3 min 5 s``: durations as people read them."""
    if value < 10:
        return f"{value:.2f} s"
    if value < 120:
        return f"{value:.1f} s"
    return f"{int(value // 60)} min {int(value % 60)} s"


@dataclass
class _Turn:
    turn: int
    arrived: float
    cursor: float  # where the next phase starts (unix time)
    phases: list[Phase] = field(default_factory=list)
    waiting: dict[str, tuple[float, str]] = field(default_factory=dict)  # approval id -> (asked, tool)

    def add(self, kind: str, label: str, start: float, end: float) -> None:
        if end > start:
            self.phases.append(Phase(kind, label, start - self.arrived, end - self.arrived))
        self.cursor = max(self.cursor, end)

    def done(self, status: str, end: float) -> Timeline:
        return Timeline(self.turn, status, self.arrived, max(0.0, end - self.arrived), tuple(self.phases))


def timelines(records: Sequence[Recorded], last: int = 10, now: float | None = None) -> list[Timeline]:
    """The timelines of the ``last`` turns the records show, newest first. A turn still
    running is drawn up to ``now`` (its last record without it), a wait for an approval
    still open with it."""
    arrivals: dict[str, float] = {}
    done: list[Timeline] = []
    turn: _Turn | None = None
    for record in records:
        data = record.data
        if record.kind == "InputAdmitted":
            message = data.get("message", {})
            arrivals[str(message.get("id"))] = _ts(message, record.at)
        elif record.kind == "TurnStarted":
            if turn is not None:  # its record never came (cannot happen): show what there was
                done.append(turn.done("interrupted", turn.cursor))
            arrived = min(arrivals.pop(str(data.get("message_id")), record.at), record.at)
            turn = _Turn(int(data.get("turn", 0)), arrived, arrived)
            turn.add("queue", "queue: waiting for the turn before", arrived, record.at)
        elif turn is not None:
            ended = _step(turn, record)
            if ended is not None:
                done.append(ended)
                turn = None
    if turn is not None:
        until = max(now, turn.cursor) if now is not None else turn.cursor
        for asked, tool in turn.waiting.values():
            turn.add("approval", f"approval: {tool} (waiting)", asked, until)
        done.append(turn.done("running", until))
    return done[::-1][:last]


def _step(turn: _Turn, record: Recorded) -> Timeline | None:
    data, at = record.data, record.at
    match record.kind:
        case "ModelSwitched":
            label = (
                f"model {data.get('from_model')} failed ({data.get('reason')}), then {data.get('to_model')}"
            )
            turn.add("model_failed", label, turn.cursor, at)
        case "ApprovalRequested":
            assistant = data.get("assistant", {})
            turn.add("model", "model: asks for tools", turn.cursor, _ts(assistant, at))
            for request in data.get("requests", ()):
                turn.waiting[str(request.get("id"))] = (
                    float(request.get("requested_at", at)),
                    str(request.get("tool", "?")),
                )
        case "ApprovalDecided":
            asked = turn.waiting.pop(str(data.get("approval_id")), None)
            if asked is not None:
                label = f"approval: {asked[1]} ({data.get('decision')})"
                turn.add("approval", label, asked[0], at)
        case "StepRecorded":
            messages: Sequence[Mapping[str, Any]] = data.get("messages", ())
            if not messages:
                return None
            assistant, results = messages[0], messages[1:]
            answered = _ts(assistant, at)
            if answered > turn.cursor:
                turn.add("model", "model: asks for tools", turn.cursor, answered)
            names = sorted({str(c.get("name")) for c in assistant.get("tool_calls", ())})
            finished = max((_ts(m, at) for m in results), default=at)
            turn.add("tools", "tools: " + ", ".join(names), max(turn.cursor, answered), finished)
        case "SessionCompacted":
            turn.add("compaction", "compaction", turn.cursor, at)
        case "TurnRecorded":
            status = str(data.get("status", "completed"))
            replies: Sequence[Mapping[str, Any]] = data.get("messages", ())
            if status == "completed" and replies:
                turn.add("model", "model: the answer", turn.cursor, _ts(replies[-1], at))
            elif status != "completed":
                error = data.get("error") or {}
                turn.add(
                    "ended",
                    f"{status.replace('_', ' ')}: {error.get('code', '')}".strip(": "),
                    turn.cursor,
                    at,
                )
            return turn.done(status, at)
    return None


def _ts(message: Mapping[str, Any], default: float) -> float:
    value = message.get("ts")
    return float(value) if isinstance(value, int | float) else default
