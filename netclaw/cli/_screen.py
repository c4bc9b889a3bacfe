"""The interactive chat's screen: what arrives while the person is typing at the prompt (a
reply to another client, a reminder firing, "reconnecting…") is written above the prompt,
and the prompt is drawn again with what they had typed so far, instead of being written
over it or leaving it gone."""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

try:
    import readline
except ImportError:  # not on every platform; input() still works without it
    readline = None  # type: ignore[assignment]


class Screen:
    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._lock = threading.Lock()
        self._prompt: str | None = None  # the prompt on screen while input() waits
        self._cleared = False  # the prompt line was cleared for output that has not ended yet
        # A dumb terminal (or none) cannot clear a line: start the output on a fresh one.
        self._clear = "\n" if os.environ.get("TERM", "dumb") == "dumb" else "\r\x1b[K"

    def ask(self, prompt: str) -> str:
        """``input(prompt)``, with output that arrives meanwhile written above it."""
        with self._lock:
            self._prompt = prompt
            self._cleared = False
        try:
            return input(prompt)
        finally:
            with self._lock:
                self._prompt = None

    def out(self, text: str) -> None:
        self._write(self.stdout, text)

    def err(self, text: str) -> None:
        self._write(self.stderr, text)

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            if self._prompt is not None and not self._cleared:
                stream.write(self._clear)
                self._cleared = True
            stream.write(text)
            stream.flush()
            if self._prompt is not None and text.endswith("\n"):
                # A whole line was written: the prompt comes back, with what was typed.
                typed = readline.get_line_buffer() if readline is not None else ""
                self.stdout.write(self._prompt + typed)
                self.stdout.flush()
                self._cleared = False
