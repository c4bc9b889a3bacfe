"""What chat platforms share on the way in: fetching the files a message shares, within
netclaw's limits, remembering what people say in a followed thread that is not for
the bot (the next turn there reads it), and asking whether a thread is a session."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from adapters.chat._port import ChatApiError
from netclaw.attachments import MAX_FILE_BYTES, MAX_FILES, IncomingFile
from netclaw.errors import NetclawError

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ASIDES = 50  # per followed thread, until the next turn there
MAX_ASIDE_SESSIONS = 1000


@dataclass(frozen=True, slots=True)
class SharedFile:
    """A file a platform message shares, before it is fetched."""

    name: str
    mime_type: str
    size: int | None  # as the platform declares it, when it does
    fetch: Callable[[int], Awaitable[bytes]]  # the bytes, refusing more than the given size


async def fetch_files(shared: Sequence[SharedFile], platform: str) -> tuple[list[IncomingFile], str]:
    """The shared files' bytes (at most MAX_FILES, each within MAX_FILE_BYTES), and a note
    for the conversation naming those that could not be taken ("" when all were)."""
    files: list[IncomingFile] = []
    refused: list[str] = []
    for f in shared[:MAX_FILES]:
        if f.size is not None and f.size > MAX_FILE_BYTES:
            refused.append(f"{f.name} is larger than {MAX_FILE_BYTES // 1_000_000} MB")
            continue
        try:
            data = await f.fetch(MAX_FILE_BYTES)
        except ChatApiError as exc:
            log.warning("%s: file %s not downloaded: %s", platform, f.name, exc)
            refused.append(f"{f.name} could not be downloaded ({exc})")
            continue
        files.append(IncomingFile(f.name, f.mime_type, data))
    if len(shared) > MAX_FILES:
        refused.append(f"only the first {MAX_FILES} files are read")
    return files, ("I could not read every file: " + "; ".join(refused) + ".") if refused else ""


class Asides(Generic[T]):
    """Messages people wrote in followed threads that got no turn, per session, until the
    next turn there takes them. Bounded; kept in memory (a restart forgets them)."""

    def __init__(self) -> None:
        self._by_session: dict[str, list[T]] = {}

    def add(self, session_id: str, item: T) -> None:
        items = self._by_session.setdefault(session_id, [])
        items.append(item)
        del items[:-MAX_ASIDES]
        while len(self._by_session) > MAX_ASIDE_SESSIONS:
            self._by_session.pop(next(iter(self._by_session)))

    def take(self, session_id: str) -> list[T]:
        return self._by_session.pop(session_id, [])


class Knowing(Protocol):
    async def knows(self, session_id: str) -> bool: ...


async def session_known(gateway: Knowing, session_id: str, platform: str) -> bool:
    """Is ``session_id`` a session already (a thread the bot takes part in)? When the gateway
    cannot tell (shutting down, the journal unreachable), no: the message is then treated
    as new to the bot, which needs a mention, rather than lost to an error."""
    try:
        return await gateway.knows(session_id)
    except NetclawError as exc:
        log.warning("%s: cannot tell whether %s is a session: %s", platform, session_id, exc)
        return False


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def with_file_names(text: str, files: Iterable[_Named]) -> str:
    """A message's text as the model reads it, naming the files shared with it."""
    shown = ", ".join(f.name for f in files)
    return f"{text}\n(shared {shown})".strip() if shown else text
