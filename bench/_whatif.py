"""What-if variants for the benchmarks: each is a proposed product change, prototyped here so
its effect can be measured next to the shipped code. Nothing in netclaw is modified; the
benchmarks use these only when asked (``--what-if ...``) and label the results as such.

* :class:`OneHopJournal` — ``SqliteJournal`` whose group commit runs its whole transaction
  (BEGIN, the executemany's, COMMIT) in ONE call on aiosqlite's thread instead of one
  thread round trip per statement.
* :class:`AiohttpOpenAIProvider` — the OpenAI-compatible streaming client on aiohttp's
  client (already a netclaw dependency) instead of httpx, reusing netclaw's own request
  builder and SSE/chunk parsing, and reading each stream to its end so the connection is
  kept alive. Minimal: no retries (the scripted provider does not fail).
* :func:`stub_sniffio` — an in-memory ``sniffio`` module (what installing the package gives
  httpcore, which otherwise retries a failing ``import sniffio`` on every pool lock).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
import types
from collections.abc import AsyncIterator
from typing import Any

from netclaw.errors import JournalError, SequenceConflict
from netclaw.persistence._sqlite import SqliteJournal, _Append, _Batch, _SaveSnapshot

_INSERT_EVENTS = "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)"
_UPSERT_SESSIONS = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq)"
    " VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq"
)
_UPSERT_SNAPSHOTS = (
    "INSERT INTO snapshots (persistence_id, seq, state, ts) VALUES (?,?,?,?)"
    " ON CONFLICT(persistence_id) DO UPDATE SET seq=excluded.seq,"
    " state=excluded.state, ts=excluded.ts WHERE excluded.seq >= snapshots.seq"
)


def stub_sniffio() -> bool:
    """Install an in-memory sniffio if the real one is missing; True if installed."""
    if "sniffio" in sys.modules:
        return False
    try:
        import sniffio  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sniffio")
        stub.current_async_library = lambda: "asyncio"  # type: ignore[attr-defined]
        sys.modules["sniffio"] = stub
        return True
    return False


class OneHopJournal(SqliteJournal):
    """SqliteJournal._commit with the transaction in a single aiosqlite call (same semantics)."""

    async def _commit(self, writes: list[Any]) -> None:
        assert self._writer is not None
        batch = _Batch()
        now = time.time()
        staged: dict[str, int] = {}
        for write in writes:
            pid = write.persistence_id
            if isinstance(write, _SaveSnapshot):
                batch.snapshots.append((pid, write.seq, write.state, now))
                batch.done.append((write.future, write.seq))
                continue
            assert isinstance(write, _Append)
            current = staged.get(pid)
            if current is None:
                current = await self._cached_last_seq(pid)
            if write.expected_seq != current:
                write.future.set_exception(SequenceConflict(pid, write.expected_seq, current))
                continue
            seq = current
            for event in write.events:
                seq += 1
                batch.events.append((pid, seq, event.type, event.payload, now))
            staged[pid] = seq
            if write.row is not None:
                r = write.row
                batch.rows.append((r.id, r.channel, r.title, r.turns, r.last_activity, r.pending, seq))
            batch.done.append((write.future, seq))
        if not batch.done:
            return
        conn = self._writer

        def transaction() -> None:  # runs on aiosqlite's thread
            db: sqlite3.Connection = conn._connection  # type: ignore[assignment]
            try:
                db.execute("BEGIN IMMEDIATE")
                if batch.events:
                    db.executemany(_INSERT_EVENTS, batch.events)
                if batch.rows:
                    db.executemany(_UPSERT_SESSIONS, batch.rows)
                if batch.snapshots:
                    db.executemany(_UPSERT_SNAPSHOTS, batch.snapshots)
                db.execute("COMMIT")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise

        try:
            await conn._execute(transaction)
        except sqlite3.Error as exc:
            for pid in staged:
                self._last_seq.pop(pid, None)
            raise JournalError(f"journal commit failed: {exc}") from exc
        self.commits += 1
        self._last_seq.update(staged)
        for future, seq in batch.done:
            if not future.done():
                future.set_result(seq)


class AiohttpOpenAIProvider:
    """What-if: netclaw's OpenAI-compatible streaming on aiohttp's client (see module doc)."""

    def __init__(self, name: str, config: Any) -> None:
        self.name = name
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._session: Any = None

    def _get_session(self) -> Any:
        import aiohttp

        if self._session is None:  # created on the loop that uses it
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.config.timeout_s),
            )
        return self._session

    async def complete(self, request: Any, on_delta: Any = None) -> Any:
        from netclaw.errors import ProviderUnavailable
        from netclaw.providers._classify import classify_http_error
        from netclaw.providers._openai import _Assembly, _decode_event, _sse_data, request_body

        try:
            from netclaw.providers._openai import _Progress
        except ImportError:  # where the shared HTTP provider code keeps it
            from netclaw.providers._http import _Progress  # type: ignore[no-redef]

        answer = _Assembly(self.name, on_delta, _Progress())
        headers = {"Accept": "text/event-stream, application/json"}
        async with self._get_session().post(
            f"{self.base_url}/chat/completions", json=request_body(request), headers=headers
        ) as response:
            if response.status >= 400:
                raise classify_http_error(response.status, await response.text(), response.headers, self.name)

            async def lines() -> AsyncIterator[str]:
                async for raw in response.content:
                    yield raw.decode("utf-8").rstrip("\r\n")

            async for payload in _sse_data(lines()):
                if payload.strip() == "[DONE]":
                    answer.done = True
                    continue  # read on to the end: the connection stays reusable
                for chunk in _decode_event(payload):
                    answer.add_chunk(chunk)
        if not answer.done and answer.finish_reason is None:
            raise ProviderUnavailable(f"provider {self.name!r}: stream ended early")
        return answer.completion()

    async def check(self) -> str:
        return "what-if provider"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
