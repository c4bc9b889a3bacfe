"""A program run in a real pseudo-terminal, driven like a person at a keyboard: typed
lines, Ctrl-C (the terminal sends SIGINT to the program), Ctrl-D, and the screen's text
to wait for."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pty
import select
import signal
import subprocess
import termios
import time
from types import TracebackType

# Line editing (readline) turns the terminal's canonical mode off while it reads a line, and
# may drop what was typed before it did; plain input() reads in canonical mode, typed-ahead too.
LINE_EDITING = importlib.util.find_spec("readline") is not None


class Terminal:
    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: os.PathLike[str] | str) -> None:
        self._master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "dumb"},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_take_terminal,  # so Ctrl-C reaches the program as SIGINT
        )
        os.close(slave)
        self.screen = ""
        self._seen = 0

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self._master)

    def send_line(self, text: str) -> None:
        os.write(self._master, text.encode() + b"\r")

    def type_at_prompt(self, text: str, prompt: str = "you> ") -> None:
        """Wait for the program to ask, then type a line (as a person would)."""
        self.expect(prompt)
        self.wait_reading()
        self.send_line(text)

    def interrupt_at_prompt(self, prompt: str = "you> ") -> None:
        self.expect(prompt)
        self.wait_reading()
        # Canonical mode can be off before the program is inside input() (a resumed chat
        # prints its transcript first), and a Ctrl-C that lands outside input() is not the
        # prompt's: under load it went unseen twice in two full runs. Nothing on screen or in
        # the terminal's modes tells the moment apart, so this one pause stays (it was 0.05 s).
        time.sleep(0.3)
        self.interrupt()

    def wait_reading(self, timeout: float = 15.0) -> None:
        """Until the program reads the keyboard (the terminal out of canonical mode: line
        editing is reading a line). Without line editing, what is typed waits for it anyway."""
        deadline = time.monotonic() + timeout
        while LINE_EDITING and termios.tcgetattr(self._master)[3] & termios.ICANON:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(
                    f"the program never read its keyboard; the terminal shows:\n{self.screen[-2000:]}"
                )
            time.sleep(0.01)

    def interrupt(self) -> None:
        os.write(self._master, b"\x03")

    def send_eof(self) -> None:
        os.write(self._master, b"\x04")

    def expect(self, text: str, timeout: float = 15.0) -> str:
        """Wait until ``text`` appears after what earlier expects consumed."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.screen.find(text, self._seen)
            if found != -1:
                self._seen = found + len(text)
                return self.screen
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.screen[-2000:]}")

    def wait(self, timeout: float = 15.0) -> int:
        """The program's exit status, once it has left."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        code = self.proc.poll()
        if code is None:
            raise AssertionError(f"the program did not leave; the terminal shows:\n{self.screen[-2000:]}")
        return code

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], min(timeout, 0.5))
        if not ready:
            return self.proc.poll() is None or True
        try:
            data = os.read(self._master, 65536)
        except OSError:  # the program closed the terminal
            return False
        self.screen += data.decode(errors="replace").replace("\r\n", "\n")
        return True


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # As a shell starts a program: Ctrl-C not ignored, though the test runner ignores it
    # (pytest-xdist's workers do, and an ignored SIGINT is inherited through exec).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
