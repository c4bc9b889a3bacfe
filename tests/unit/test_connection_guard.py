"""Which connection the guard closes at the cap: a dawdler, from the greediest address."""

from __future__ import annotations

from typing import Any

from netclaw.http.listener import ConnectionGuard


class Conn:
    def __init__(self, address: str, *, proven: bool = False) -> None:
        self.address = address
        self.proven = proven
        self.closed = False

    def close(self) -> None:
        self.closed = True


def admit(guard: ConnectionGuard, conn: Any) -> bool:
    return guard.admit(conn)


def test_the_greediest_address_pays_first() -> None:
    guard = ConnectionGuard(limit=4)
    quiet = Conn("10.0.0.2")  # the oldest dawdler, but its address holds one connection
    greedy = [Conn("10.0.0.1") for _ in range(3)]
    for conn in (quiet, *greedy):
        assert admit(guard, conn)
    assert admit(guard, Conn("10.0.0.3"))
    assert greedy[0].closed and not quiet.closed and len(guard) == 4


def test_real_requests_are_never_evicted_and_a_full_house_refuses() -> None:
    guard = ConnectionGuard(limit=2)
    busy = [Conn("10.0.0.1", proven=True), Conn("10.0.0.1", proven=True)]
    for conn in busy:
        assert admit(guard, conn)
    assert not admit(guard, Conn("10.0.0.9"))
    assert not any(c.closed for c in busy) and guard.refused == 1


def test_release_forgets_the_connection() -> None:
    guard = ConnectionGuard(limit=2)
    first, second = Conn("a"), Conn("a")
    admit(guard, first)
    admit(guard, second)
    guard.release(first)
    guard.release(first)  # twice is harmless
    assert len(guard) == 1
    assert admit(guard, Conn("b")) and len(guard) == 2
