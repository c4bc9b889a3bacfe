"""systemd's notify protocol and signal delivery, against a real datagram socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netclaw.process.service import Notifier, SignalWaiter, heartbeat


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_ready_reloading_stopping(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path})
    notifier.ready("3 session(s) resident")
    assert received(sock) == ["READY=1", "STATUS=3 session(s) resident"]
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading()
    fields = received(sock)
    assert fields[0] == "RELOADING=1"
    key, _, usec = fields[1].partition("=")
    assert key == "MONOTONIC_USEC" and before <= int(usec) <= before + 5_000_000
    notifier.stopping()
    assert received(sock)[0] == "STOPPING=1"


def test_status_is_sent_only_when_it_changes(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path})
    notifier.status("a")
    notifier.status("a")
    notifier.status("b")
    assert received(sock) == ["STATUS=a"]
    assert received(sock) == ["STATUS=b"]
    sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        sock.recv(100)


def test_outside_systemd_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled and notifier.watchdog_s is None
    assert notifier.send("READY=1") is False


def test_a_dead_socket_is_a_warning_not_a_crash(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert notifier.send("READY=1") is False
    assert "sd_notify(READY=1) failed" in caplog.text


def test_a_supervisor_that_reads_late_never_blocks_a_ping(
    notify_socket: tuple[socket.socket, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody reads the socket: its queue fills (ten datagrams by default) and a blocking
    send would stall the heartbeat's loop, the whole daemon with it. Pings are dropped
    instead, with one warning; once it reads again, sends go through."""
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
    done = threading.Event()

    def ping() -> None:
        for _ in range(200):  # far more than any queue holds
            notifier.watchdog()
        done.set()

    threading.Thread(target=ping, daemon=True).start()
    try:
        assert done.wait(10), "a ping blocked on the full queue"
    finally:
        sock.settimeout(0.1)
        with contextlib.suppress(TimeoutError):  # unblock the old code's thread
            while True:
                sock.recv(4096)
    warnings = [r.getMessage() for r in caplog.records if "sd_notify(WATCHDOG=1) dropped" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per spell, not once per ping
    assert notifier.send("STATUS=back") is True
    sock.settimeout(5)
    assert received(sock) == ["STATUS=back"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "2000000"}, 2.0),
        ({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}, 2.0),
        ({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert Notifier({"NOTIFY_SOCKET": "/x", **env}).watchdog_s == expected


async def test_heartbeat_pings_the_watchdog_from_the_loop(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})  # ping every 50 ms
    task = asyncio.create_task(heartbeat(notifier, lambda: "1 session(s) resident"))
    loop = asyncio.get_running_loop()
    got: list[str] = []
    while got.count("WATCHDOG=1") < 3:
        got += await loop.run_in_executor(None, received, sock)
    task.cancel()
    assert got.count("STATUS=1 session(s) resident") == 1  # unchanged status is not repeated
    sock.settimeout(0.05)
    drain(sock)
    # A wedged loop sends nothing: the pings come from the loop itself.
    stalled = asyncio.create_task(heartbeat(notifier, lambda: "x"))
    await asyncio.sleep(0)  # its first ping
    time.sleep(0.3)  # noqa: ASYNC251 - the point: the loop is blocked for six periods, no pings
    pings = drain(sock).count("WATCHDOG=1")
    stalled.cancel()
    assert pings == 1


def drain(sock: socket.socket) -> list[str]:
    found: list[str] = []
    try:
        while True:
            found += received(sock)
    except TimeoutError:
        return found


def test_signal_waiter_wakes_at_once() -> None:
    with SignalWaiter((signal.SIGHUP, signal.SIGTERM)) as waiter:
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGHUP))
        started = time.monotonic()
        timer.start()
        assert waiter.wait() == [signal.SIGHUP]
        assert time.monotonic() - started < 0.5  # no polling interval
        os.kill(os.getpid(), signal.SIGTERM)
        assert waiter.wait() == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_slow_start_up_step_keeps_asking_for_time_until_it_ends(
    notify_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = notify_socket
    monkeypatch.setattr("netclaw.process.service.EXTEND_EVERY_S", 0.05)
    notifier = Notifier({"NOTIFY_SOCKET": path})
    with notifier.extending_start("preparing the database"):
        asks = [received(sock) for _ in range(3)]  # the step is still running: asked again and again
    assert all(a == ["EXTEND_TIMEOUT_USEC=60000000", "STATUS=preparing the database"] for a in asks)
    while True:  # what was sent before the step ended; then nothing more
        sock.settimeout(0.3)
        try:
            sock.recv(4096)
        except TimeoutError:
            break
    assert not any(t.name == "netclaw-start-extend" for t in threading.enumerate())


def test_outside_systemd_a_slow_step_starts_no_thread() -> None:
    with Notifier({}).extending_start("preparing the database"):
        assert not any(t.name == "netclaw-start-extend" for t in threading.enumerate())
