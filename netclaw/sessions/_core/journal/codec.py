"""The journal's form of a session's events (pure): each event as a type name and a JSON
payload, and back. What was written by an older netclaw still reads (fields added since
have defaults); an event this version does not know is refused as written by a newer one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from netclaw import jsontext
from netclaw.errors import JournalCorrupt
from netclaw.lineage import ChildReport, ChildTask
from netclaw.messages import Attachment, ChatMessage, Transcript
from netclaw.records import builder
from netclaw.security.policy import Place
from netclaw.sessions._core.journal.events import (
    ApprovalDecided,
    ApprovalRequest,
    ApprovalRequested,
    ChildDetached,
    ChildReported,
    ChildSpawned,
    ContextAttached,
    HistoryTrimmed,
    InputAdmitted,
    MemoriesExtracted,
    ModelPinned,
    ModelSwitched,
    ReplyDelivered,
    ReplySpoken,
    RoundStarted,
    SessionCompacted,
    SessionEvent,
    SessionReset,
    SessionTitleSet,
    SpeechTranscribed,
    StepRecorded,
    TaskGiven,
    TurnRecorded,
    TurnStarted,
    VoiceRepliesSet,
)


def _turn_recorded(event: TurnRecorded) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "turn": event.turn,
        "message_id": event.message_id,
        "status": event.status,
        "messages": [m.to_dict() for m in event.messages],
    }
    optional = {"error": event.error, "usage": event.usage, "spent": event.spent}
    payload.update({key: dict(value) for key, value in optional.items() if value is not None})
    if event.model is not None:
        payload["model"] = event.model
    if event.cost is not None:
        payload["cost"] = event.cost
    return payload


def encode(event: SessionEvent) -> tuple[str, str]:  # noqa: C901 - one case per event
    """(type, JSON payload) for the journal."""
    payload: dict[str, Any]
    match event:
        case InputAdmitted(message=m, place=place):
            payload = {"message": m.to_dict()}
            if place is not None:
                payload["place"] = place.to_dict()
        case TurnStarted(turn=t, message_id=mid):
            payload = {"turn": t, "message_id": mid}
        case StepRecorded(turn=t, messages=ms):
            payload = {"turn": t, "messages": [m.to_dict() for m in ms]}
        case TurnRecorded():
            payload = _turn_recorded(event)
        case SessionTitleSet(title=title):
            payload = {"title": title}
        case HistoryTrimmed() | SessionCompacted():
            payload = event.to_payload()
        case SessionReset(by=by):
            payload = {"by": by}
        case MemoriesExtracted(through_turn=turn, saved=saved):
            payload = {"through_turn": turn, "saved": saved}
        case ApprovalRequested(turn=turn, assistant=assistant, requests=requests):
            payload = {
                "turn": turn,
                "assistant": assistant.to_dict(),
                "requests": [r.to_dict() for r in requests],
            }
        case ApprovalDecided(approval_id=aid, decision=decision, by=by):
            payload = {"approval_id": aid, "decision": decision, "by": by}
        case ReplyDelivered(turn=turn, message_ids=ids):
            payload = {"turn": turn, "message_ids": list(ids)}
        case RoundStarted(turn=turn, assistant=assistant):
            payload = {"turn": turn, "assistant": assistant.to_dict()}
        case ChildSpawned(task=task, call_id=call_id, turn=turn, text=text, wait=wait):
            payload = {"task": task.to_dict(), "call_id": call_id, "turn": turn, "text": text, "wait": wait}
        case ChildReported(report=report):
            payload = report.to_dict()
        case ChildDetached(n=n):
            payload = {"n": n}
        case TaskGiven(task=task):
            payload = task.to_dict()
        case ContextAttached(turn=turn, message=m, told_time=told):
            payload = {"turn": turn, "message": m.to_dict()}
            if told:
                payload["told_time"] = True
        case ModelSwitched(turn=turn, from_model=old, to_model=new, reason=reason):
            payload = {"turn": turn, "from_model": old, "to_model": new, "reason": reason}
        case ModelPinned(model=model, by=by):
            payload = {"model": model, "by": by}
        case SpeechTranscribed(message_id=mid, transcripts=heard, spent=spent, cost=cost, model=model):
            payload = {"message_id": mid, "transcripts": [{"file": i, **t.to_dict()} for i, t in heard]}
            if spent is not None:
                payload["spent"] = dict(spent)
            if cost is not None:
                payload["cost"] = cost
            if model is not None:
                payload["model"] = model
        case VoiceRepliesSet(on=on, by=by):
            payload = {"on": on, "by": by}
        case ReplySpoken(turn=turn, file=file, spent=spent, cost=cost, model=model):
            payload = {"turn": turn, "file": file.to_dict()}
            optional = {"spent": None if spent is None else dict(spent), "cost": cost, "model": model}
            payload.update({k: v for k, v in optional.items() if v is not None})
    return type(event).__name__, jsontext.dumps(payload)


# The events every turn writes, built as recovery reads thousands of them (netclaw.records):
# every field, in the order each class declares them.
_input_admitted = builder(InputAdmitted)
_turn_started = builder(TurnStarted)
_step_recorded = builder(StepRecorded)
_turn_recorded_event = builder(TurnRecorded)


def decode(type_name: str, payload: str) -> SessionEvent:
    try:
        data = json.loads(payload)
    except (ValueError, TypeError) as exc:  # TypeError: a payload that is not text
        raise JournalCorrupt(f"cannot decode {type_name} event: {exc}") from exc
    return _event(type_name, data)


def decode_all(stored: Sequence[tuple[str, str]]) -> list[SessionEvent]:
    """:func:`decode` of each (type name, payload), their JSON parsed in one call (a
    recovery's replay decodes thousands)."""
    try:
        values = jsontext.loads_each([payload for _, payload in stored])
    except (ValueError, TypeError):  # one of them is broken: decoding each names it
        return [decode(type_name, payload) for type_name, payload in stored]
    return [_event(type_name, data) for (type_name, _), data in zip(stored, values, strict=True)]


def _event(type_name: str, data: Any) -> SessionEvent:  # noqa: C901 - one case per event
    try:
        match type_name:
            case "InputAdmitted":
                message = ChatMessage.from_dict(data["message"])
                place = data.get("place")
                return _input_admitted(message, Place.from_dict(place) if place else None)
            case "TurnStarted":
                return _turn_started(int(data["turn"]), str(data["message_id"]))
            case "StepRecorded":
                return _step_recorded(int(data["turn"]), _messages(data["messages"]))
            case "TurnRecorded":
                turn = int(data["turn"])  # first: a payload that is no object fails here, a TypeError
                get = data.get
                return _turn_recorded_event(
                    turn,
                    str(data["message_id"]),
                    data["status"],
                    _messages(get("messages", [])),
                    get("error"),
                    get("usage"),
                    get("spent"),
                    get("model"),
                    get("cost"),
                )
            case "SessionTitleSet":
                return SessionTitleSet(str(data["title"]))
            case "HistoryTrimmed":
                return HistoryTrimmed(**data)
            case "SessionReset":
                return SessionReset(str(data["by"]))
            case "MemoriesExtracted":
                return MemoriesExtracted(int(data["through_turn"]), int(data["saved"]))
            case "ApprovalRequested":
                return ApprovalRequested(
                    int(data["turn"]),
                    ChatMessage.from_dict(data["assistant"]),
                    tuple(ApprovalRequest.from_dict(r) for r in data["requests"]),
                )
            case "ReplyDelivered":
                return ReplyDelivered(int(data["turn"]), tuple(str(i) for i in data["message_ids"]))
            case "ApprovalDecided":
                return ApprovalDecided(str(data["approval_id"]), data["decision"], str(data["by"]))
            case "RoundStarted":
                return RoundStarted(int(data["turn"]), ChatMessage.from_dict(data["assistant"]))
            case "ChildSpawned":
                return ChildSpawned(
                    ChildTask.from_dict(data["task"]),
                    str(data["call_id"]),
                    int(data["turn"]),
                    str(data["text"]),
                    bool(data["wait"]),
                )
            case "ChildReported":
                return ChildReported(ChildReport.from_dict(data))
            case "ChildDetached":
                return ChildDetached(int(data["n"]))
            case "TaskGiven":
                return TaskGiven(ChildTask.from_dict(data))
            case "ContextAttached":
                message = ChatMessage.from_dict(data["message"])
                return ContextAttached(int(data["turn"]), message, bool(data.get("told_time", False)))
            case "ModelSwitched":
                return ModelSwitched(
                    int(data["turn"]), str(data["from_model"]), str(data["to_model"]), str(data["reason"])
                )
            case "ModelPinned":
                model = data["model"]
                return ModelPinned(None if model is None else str(model), str(data["by"]))
            case "SpeechTranscribed":
                return SpeechTranscribed(
                    str(data["message_id"]),
                    tuple((int(t["file"]), Transcript.from_dict(t)) for t in data["transcripts"]),
                    data.get("spent"),
                    data.get("cost"),
                    data.get("model"),
                )
            case "VoiceRepliesSet":
                return VoiceRepliesSet(bool(data["on"]), str(data["by"]))
            case "ReplySpoken":
                return ReplySpoken(
                    int(data["turn"]),
                    Attachment.from_dict(data["file"]),
                    data.get("spent"),
                    data.get("cost"),
                    data.get("model"),
                )
            case "SessionCompacted":
                data["cleared"] = tuple(data["cleared"])
                data["tiers"] = tuple(data["tiers"])
                return SessionCompacted(**data)
    except (ValueError, KeyError, TypeError) as exc:
        raise JournalCorrupt(f"cannot decode {type_name} event: {exc}") from exc
    raise JournalCorrupt(f"unknown event type {type_name!r} (written by a newer netclaw?)")


def _messages(items: list[Mapping[str, Any]]) -> tuple[ChatMessage, ...]:
    return tuple(ChatMessage.from_dict(m) for m in items)
