"""The daemon's side of its supervisor: systemd's notify protocol and signal delivery.

- :class:`Notifier` speaks ``sd_notify`` (``READY=1``, ``RELOADING=1`` with
  ``MONOTONIC_USEC`` so ``Type=notify-reload`` works, ``STOPPING=1``, ``STATUS=``,
  ``WATCHDOG=1``). Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op.
- :func:`heartbeat` runs *on the I/O loop*: it pings the watchdog and refreshes the
  status line. A wedged loop stops pinging, so systemd restarts the daemon.
- :class:`SignalWaiter` blocks the main thread until a signal arrives, with no polling
  delay: handlers write to a self-pipe (``signal.set_wakeup_fd``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType

log = logging.getLogger(__name__)

STATUS_EVERY_S = 5.0  # the status line's refresh when there is no watchdog to pace it
STATE_WAIT_S = 2.0  # how long READY/RELOADING/STOPPING wait for room in systemd's queue
# While a slow start-up step runs (a migration that rewrites the journal), systemd is asked
# this often for this much more time: a step that is alive is never killed by
# TimeoutStartSec=, and one that hangs is, this long after its last word.
EXTEND_EVERY_S = 20.0
EXTEND_BY_S = 60.0


class Notifier:
    """``sd_notify`` over ``$NOTIFY_SOCKET`` (a path, or ``@`` for an abstract socket)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        if address is not None and address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address
        self.watchdog_s = _watchdog_interval(env)
        self._last_status: str | None = None
        self._behind = False  # systemd's queue was full at the last send (said once per spell)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str, wait_s: float = 0.0) -> bool:
        """One datagram of ``KEY=value`` lines; False (and a warning) if it could not go.

        A datagram socket's send blocks while the reader's queue is full (ten datagrams by
        default, ``net.unix.max_dgram_qlen``), and the heartbeat sends from the I/O loop:
        by default a send that would wait is dropped instead, so a supervisor that reads
        late can never stall the daemon. ``wait_s`` lets a state change (ready, reloading,
        stopping), sent from the main thread, wait that long for room.
        """
        if self.address is None:
            return False
        what = fields[0] if fields else ""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.settimeout(wait_s)  # 0: non-blocking
                sock.connect(self.address)
                sock.sendall("\n".join(fields).encode())
        except (BlockingIOError, TimeoutError):
            if not self._behind:
                log.warning(
                    "sd_notify(%s) dropped: the supervisor is not reading its notify socket "
                    "(its queue is full); later messages are tried again",
                    what,
                )
            self._behind = True
            return False
        except OSError as exc:
            log.warning("sd_notify(%s) failed: %s", what, exc)
            return False
        self._behind = False
        return True

    def ready(self, status: str | None = None) -> None:
        self.send("READY=1", *([f"STATUS={status}"] if status else []), wait_s=STATE_WAIT_S)

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd tell this reload's READY=1 from an earlier one.
        self.send(
            "RELOADING=1",
            f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}",
            wait_s=STATE_WAIT_S,
        )

    @contextlib.contextmanager
    def extending_start(self, status: str) -> Iterator[None]:
        """While the block runs, ask systemd for more start-up time (``EXTEND_TIMEOUT_USEC``)
        now and every :data:`EXTEND_EVERY_S`, with ``status`` shown; it can only lengthen
        the start timeout, never shorten it. A no-op outside systemd."""
        if self.address is None:
            yield
            return
        done = threading.Event()

        def extend() -> None:
            while True:
                self.send(f"EXTEND_TIMEOUT_USEC={int(EXTEND_BY_S * 1_000_000)}", f"STATUS={status}")
                if done.wait(EXTEND_EVERY_S):
                    return

        thread = threading.Thread(target=extend, name="netclaw-start-extend", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(5)

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping", wait_s=STATE_WAIT_S)

    def status(self, text: str) -> None:
        """``STATUS=`` when it changed since the last one sent."""
        if text != self._last_status and self.send(f"STATUS={text}"):
            self._last_status = text

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")


def _watchdog_interval(env: dict[str, str] | os._Environ[str]) -> float | None:
    """The watchdog period systemd set for *this* process, in seconds (None: no watchdog)."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if usec <= 0 or (pid and pid != str(os.getpid())):
        return None
    return usec / 1_000_000


async def heartbeat(notifier: Notifier, status: Callable[[], str]) -> None:
    """On the loop until cancelled: ``WATCHDOG=1`` at half the watchdog period, and the
    status line (sessions, channels) whenever it changes."""
    period = notifier.watchdog_s / 2 if notifier.watchdog_s else STATUS_EVERY_S
    while True:
        if notifier.watchdog_s:
            notifier.watchdog()
        try:
            notifier.status(status())
        except Exception:
            log.debug("status line failed", exc_info=True)
        await asyncio.sleep(period)


class SignalWaiter:
    """Installs handlers for ``signals`` and lets the main thread wait for the next one.

    Use as a context manager; the previous handlers and wakeup fd come back on exit.
    """

    def __init__(self, signals: Iterable[signal.Signals]) -> None:
        self.signals = tuple(signals)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # set_wakeup_fd requires it
        self._previous: dict[signal.Signals, object] = {}
        self._previous_fd = -1

    def __enter__(self) -> SignalWaiter:
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, _note)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)

    def wait(self) -> list[signal.Signals]:
        """Block until at least one signal arrived; the ones that did, in order."""
        data = os.read(self._read_fd, 64)
        return [signal.Signals(b) for b in data if b in {int(s) for s in self.signals}]


def _note(signum: int, frame: FrameType | None) -> None:
    """The handler does nothing itself: the wakeup fd already carries the signal number."""
