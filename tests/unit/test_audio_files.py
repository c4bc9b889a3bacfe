"""Audio attachments (netclaw/attachments.py): which files are audio (by their bytes, or a
declared ``audio/*`` type or an audio name), and how long a recording plays, read from its
headers — a WAV's data chunk, an Ogg stream's last granule (Opus at 48 kHz less its
pre-skip, Vorbis at its own rate), an MP4's movie header — so the duration limit holds
before anything is sent to a speech endpoint."""

from __future__ import annotations

import struct

import pytest

from netclaw.attachments import IncomingFile, audio_seconds, classify
from tests.fakes.speech_api import silence


def ogg_page(granule: int, payload: bytes) -> bytes:
    return b"OggS" + b"\x00\x00" + struct.pack("<q", granule) + b"\x00" * 13 + payload


def opus(seconds: float, pre_skip: int = 312) -> bytes:
    head = (
        b"OpusHead"
        + bytes([1, 1])
        + struct.pack("<H", pre_skip)
        + struct.pack("<I", 48_000)
        + b"\x00\x00\x00"
    )
    return ogg_page(0, head) + ogg_page(int(seconds * 48_000) + pre_skip, b"\x00" * 40)


def vorbis(seconds: float, rate: int = 44_100) -> bytes:
    head = b"\x01vorbis" + struct.pack("<I", 0) + bytes([2]) + struct.pack("<I", rate) + b"\x00" * 12
    return ogg_page(0, head) + ogg_page(int(seconds * rate), b"\x00" * 40)


def m4a(seconds: float, version: int = 0) -> bytes:
    ftyp = struct.pack(">I", 20) + b"ftypM4A " + b"\x00" * 4 + b"M4A "
    if version:
        times = struct.pack(">QQIQ", 0, 0, 600, int(seconds * 600))
    else:
        times = struct.pack(">IIII", 0, 0, 600, int(seconds * 600))
    body = bytes([version, 0, 0, 0]) + times + b"\x00" * 80
    mvhd = struct.pack(">I", 8 + len(body)) + b"mvhd" + body
    return ftyp + struct.pack(">I", 8 + len(mvhd)) + b"moov" + mvhd


@pytest.mark.parametrize(
    ("data", "seconds"),
    [
        (silence(2.5), 2.5),
        (opus(7.25), 7.25),
        (vorbis(3.0), 3.0),
        (m4a(65.0), 65.0),
        (m4a(912.5, version=1), 912.5),
        (b"ID3\x04" + b"\x00" * 100, None),  # MP3: the endpoint reports it
        (b"OggS" + b"\x00" * 40, None),  # an Ogg stream that does not say what it holds
    ],
)
def test_how_long_a_recording_plays_is_read_from_its_headers(data: bytes, seconds: float | None) -> None:
    found = audio_seconds(data)
    assert found == (pytest.approx(seconds, abs=0.01) if seconds is not None else None)


@pytest.mark.parametrize(
    ("name", "declared", "data", "kind", "mime"),
    [
        ("voice.ogg", "application/octet-stream", opus(1), "audio", "audio/ogg"),  # the bytes say so
        ("note", "", silence(0.1), "audio", "audio/wav"),
        ("clip.m4a", "application/octet-stream", m4a(1), "audio", "audio/mp4"),
        ("clip.webm", "audio/webm;codecs=opus", b"\x1a\x45\xdf\xa3" + b"\x00" * 20, "audio", "audio/webm"),
        ("song.mp3", "audio/mpeg", b"\xff\xfb\x90\x00" + b"\x00" * 20, "audio", "audio/mpeg"),  # declared
        ("voice-message.opus", "application/octet-stream", b"\x00\x01", "audio", "application/octet-stream"),
        ("notes.txt", "text/plain", "\ufeffhello".encode("utf-16"), "other", "text/plain"),  # not audio
        ("photo.png", "audio/wav", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "image", "image/png"),  # bytes win
    ],
)
def test_audio_is_known_by_its_bytes_its_declared_type_or_its_name(
    name: str, declared: str, data: bytes, kind: str, mime: str
) -> None:
    assert classify(IncomingFile(name, declared, data))[:2] == (kind, mime)
