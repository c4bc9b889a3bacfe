"""Closed-loop clients for several nodes, as a load balancer in front of them would see
them (shared by tests/e2e/test_cluster_operations.py and bench/cluster.py).

Each worker sends its session's next message (``?wait=1``, with its own idempotency key)
once the last one was answered, to the next node in the pool, round-robin. A message
that is not answered 200 — a 503, a dropped connection — is sent again with the same key
(after 0.1 s), as a careful client would; every such answer is recorded with its time,
so a run can count what clients saw around a kill, a drain or a restart. A node taken
out of the pool (``take_out``: the balancer noticed it is gone or draining) gets no new
requests; requests already sent to it run their course.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True, slots=True)
class Miss:
    """A request that was not answered 200: when, by which node, and how."""

    at: float  # time.monotonic()
    node: str
    what: str  # "503", "502", "ConnectError", ...
    detail: str = ""  # the error's message


class Clients:
    def __init__(
        self,
        urls: dict[str, str],
        token: str,
        sessions: list[str],
        *,
        workers: int | None = None,
        timeout_s: float = 60.0,
        give_up_s: float = 120.0,
    ) -> None:
        self._urls = dict(urls)
        self._pool = list(urls)
        self._token = token
        self.sessions = sessions
        self._workers = workers or len(sessions)
        self._timeout_s = timeout_s
        self._give_up_s = give_up_s
        self.acked: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)  # (id, text)
        self.misses: list[Miss] = []
        self.lost: list[str] = []  # messages never answered 200 within give_up_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._turn = itertools.count()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self._workers)
        ]

    # -- the balancer's pool --------------------------------------------------------------------

    def take_out(self, name: str) -> None:
        with self._lock:
            if name in self._pool:
                self._pool.remove(name)

    def put_back(self, name: str, url: str | None = None) -> None:
        with self._lock:
            if url is not None:
                self._urls[name] = url
            if name not in self._pool:
                self._pool.append(name)

    def _pick(self) -> tuple[str, str]:
        with self._lock:
            name = self._pool[next(self._turn) % len(self._pool)]
            return name, self._urls[name]

    # -- running ------------------------------------------------------------------------------

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self._give_up_s + 10)

    @property
    def answered(self) -> int:
        return sum(map(len, self.acked.values()))

    def misses_between(self, start: float, end: float, what: str | None = None) -> list[Miss]:
        return [m for m in self.misses if start <= m.at < end and (what is None or m.what == what)]

    def _run(self, worker: int) -> None:
        session = self.sessions[worker % len(self.sessions)]
        headers = {"Authorization": f"Bearer {self._token}"}
        with httpx.Client(headers=headers, timeout=self._timeout_s) as client:
            for n in itertools.count():
                if self._stop.is_set():
                    return
                self._send(client, session, f"w{worker}-m{n}")

    def _send(self, client: httpx.Client, session: str, text: str) -> None:
        give_up = time.monotonic() + self._give_up_s
        while time.monotonic() < give_up:
            node, url = self._pick()
            try:
                answer = client.post(
                    f"{url}/api/sessions/{session}/messages",
                    params={"wait": "1"},
                    json={"text": text, "user": "load"},
                    headers={"Idempotency-Key": text},
                )
            except httpx.HTTPError as exc:
                self._missed(node, type(exc).__name__, str(exc))
            else:
                if answer.status_code == 200:
                    with self._lock:
                        self.acked[session].append((answer.json()["message_id"], text))
                    return
                self._missed(node, str(answer.status_code), answer.text[:300])
            time.sleep(0.1)
        with self._lock:
            self.lost.append(text)

    def _missed(self, node: str, what: str, detail: str) -> None:
        with self._lock:
            self.misses.append(Miss(time.monotonic(), node, what, detail))
