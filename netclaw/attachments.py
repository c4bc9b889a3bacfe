"""Files that come with a message: checked, classified and stored under the session's
folder (``<data_dir>/files/<session>/``), whoever brought them (Slack, Discord, the API).

- Kinds: ``text`` (logs, code, CSV, JSON, Markdown… — the declared type or the name says
  text *and* the bytes are UTF-8 without NULs) goes to the model as text, bounded;
  ``image`` (PNG, JPEG, GIF, WebP — the bytes must carry that format's signature, whatever
  the declared type) goes as an image part to a vision-capable model; ``audio`` (WAV, Ogg,
  MP3, FLAC, M4A, WebM — by signature, or an ``audio/*`` type) is transcribed before the
  turn that reads it (netclaw/speech.py) and the model gets the transcript; anything else
  is named, never sent.
- Names are reduced to a safe base name; the stored file is ``<sha256 prefix>-<name>``,
  so a message delivered twice writes the same file, not a second one.
- Limits here are the one place that says how big is too big: a channel refuses a larger
  download before fetching it (:data:`MAX_FILE_BYTES`).
- No secret the scanner (:mod:`netclaw.security.redact`) recognises is stored: a text file is kept
  redacted, as the model reads it; in any other file each secret's bytes are overwritten
  with ``*`` of the same length, so the file keeps its structure (offsets in a PDF, sizes
  in an archive) and still opens. The name is redacted too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from netclaw.errors import InvalidInput
from netclaw.messages import Attachment, AttachmentKind
from netclaw.security.redact import mask, merge, redact

MAX_FILE_BYTES = 20_000_000  # per file, as downloaded or posted
MAX_FILES = 10  # per message
MAX_TEXT_CHARS = 50_000  # of one text file given to the model
MAX_IMAGE_BYTES = 5_000_000  # providers refuse larger images (Anthropic: 5 MB)

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/csv",
        "application/x-ndjson",
    }
)
_TEXT_SUFFIXES = frozenset(
    ".txt .log .md .markdown .rst .csv .tsv .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .conf "
    ".xml .html .htm .css .py .pyi .js .mjs .ts .tsx .jsx .go .rs .java .kt .c .h .cc .cpp .hpp "
    ".cs .rb .php .sh .bash .zsh .ps1 .sql .diff .patch .env .properties .gradle .tf .lua .swift "
    ".r .scala .dockerfile .gitignore .srt .vtt".split()
)
_IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


_AUDIO_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
    (b"\x1a\x45\xdf\xa3", "audio/webm"),
)
_AUDIO_SUFFIXES = frozenset(".wav .ogg .oga .opus .mp3 .m4a .flac .webm .aac".split())


@dataclass(frozen=True, slots=True)
class IncomingFile:
    """A file as a channel received it."""

    name: str
    mime_type: str
    data: bytes


def safe_name(name: str) -> str:
    """A base name that is safe on disk and in a prompt (no directories, no controls)."""
    base = PurePath(name.replace("\\", "/")).name
    base = re.sub(r"[^\w.\- ()+,@]", "_", base).strip(" .")
    return base[:120] or "file"


def image_type(data: bytes) -> str | None:
    """The image format the bytes really are, or None."""
    for signature, mime in _IMAGE_SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def audio_type(data: bytes) -> str | None:
    """The audio format the bytes really are (by signature), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[4:11] == b"ftypM4A" or (data[4:8] == b"ftyp" and data[8:11] == b"mp4"):
        return "audio/mp4"
    for signature, mime in _AUDIO_SIGNATURES:
        if data.startswith(signature):
            return mime
    return None


def _is_audio(file: IncomingFile) -> str | None:
    found = audio_type(file.data[:16])
    if found is not None:
        return found
    mime = file.mime_type.split(";", 1)[0].strip().lower()
    if mime.startswith("audio/") or PurePath(file.name.lower()).suffix in _AUDIO_SUFFIXES:
        return mime if mime.startswith("audio/") else "application/octet-stream"
    return None


def audio_seconds(data: bytes) -> float | None:
    """How long a WAV, Ogg (Opus, Vorbis) or MP4/M4A recording plays, read from its
    headers; None for other formats or bytes that do not say (the endpoint then reports it)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return _wav_seconds(data)
    if data[:4] == b"OggS":
        return _ogg_seconds(data)
    if data[4:8] == b"ftyp":
        return _mp4_seconds(data)
    return None


def _mp4_seconds(data: bytes) -> float | None:
    """The movie header's duration over its timescale (``mvhd``, version 0 or 1)."""
    at = data.find(b"mvhd")
    if at < 0 or at + 32 > len(data):
        return None
    if data[at + 4] == 1:  # 64-bit times
        scale, length = struct.unpack_from(">IQ", data, at + 24)
    else:
        scale, length = struct.unpack_from(">II", data, at + 16)
    return length / scale if scale else None


def _wav_seconds(data: bytes) -> float | None:
    at, byte_rate = 12, 0
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if chunk == b"fmt " and size >= 16:
            byte_rate = struct.unpack_from("<I", data, at + 16)[0]
        elif chunk == b"data" and byte_rate:
            # A streamed WAV (espeak-ng's to a pipe) says 0 or 0xFFFFFFFF: the rest is data.
            length = size if 0 < size <= len(data) - at - 8 else len(data) - at - 8
            return length / byte_rate
        at += 8 + size + (size & 1)
    return None


def _ogg_seconds(data: bytes) -> float | None:
    """The last page's granule position over the stream's rate (Opus: always 48 kHz, less
    its pre-skip; Vorbis: the rate in its identification header)."""
    if b"OpusHead" in data[:200]:
        head = data.index(b"OpusHead")
        rate, skip = 48_000, struct.unpack_from("<H", data, head + 10)[0] if head + 12 <= len(data) else 0
    elif b"\x01vorbis" in data[:200]:
        head = data.index(b"\x01vorbis")
        if head + 16 > len(data):
            return None
        rate, skip = struct.unpack_from("<I", data, head + 12)[0], 0
    else:
        return None
    last = data.rfind(b"OggS")
    if last < 0 or last + 14 > len(data) or not rate:
        return None
    granule = struct.unpack_from("<q", data, last + 6)[0]
    return max(granule - skip, 0) / rate if granule >= 0 else None


def _is_texty(name: str, mime_type: str) -> bool:
    mime = mime_type.split(";", 1)[0].strip().lower()
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return True
    suffix = PurePath(name.lower()).suffix or ("." + name.lower())  # "Dockerfile", ".env"
    return suffix in _TEXT_SUFFIXES


def classify(file: IncomingFile) -> tuple[AttachmentKind, str, str | None, bool]:
    """``(kind, mime type, text, truncated)``: what the model may get of ``file``."""
    real_image = image_type(file.data[:16])
    if real_image is not None:
        if len(file.data) > MAX_IMAGE_BYTES:
            return "other", real_image, None, False
        return "image", real_image, None, False
    audio = _is_audio(file)
    if audio is not None:
        return "audio", audio, None, False
    mime = file.mime_type.split(";", 1)[0].strip().lower() or "application/octet-stream"
    if _is_texty(file.name, mime) and b"\x00" not in file.data[:8192]:
        try:
            text = file.data.decode("utf-8")
        except UnicodeDecodeError:
            return "other", mime, None, False
        cut = len(text) > MAX_TEXT_CHARS
        return "text", mime, text[:MAX_TEXT_CHARS] if cut else text, cut
    return "other", mime, None, False


def folder_of(data_dir: Path, session_id: str) -> Path:
    """Where a session's files live (the id made a safe directory name)."""
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    return data_dir / "files" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', session_id)[:80]}-{digest}"


def check_files(files: Sequence[IncomingFile]) -> None:
    if len(files) > MAX_FILES:
        raise InvalidInput("files", f"at most {MAX_FILES} files per message ({len(files)} given)")
    for i, file in enumerate(files):
        if len(file.data) > MAX_FILE_BYTES:
            raise InvalidInput(
                f"files[{i}]", f"{file.name!r} is {len(file.data):,} bytes; the limit is {MAX_FILE_BYTES:,}"
            )
        if not file.data:
            raise InvalidInput(f"files[{i}]", f"{file.name!r} is empty")


@dataclass(frozen=True, slots=True)
class Stored:
    """What :func:`save` kept: the files as described to the model, and the kinds of
    secret taken out of them (their sender is told)."""

    files: tuple[Attachment, ...]
    redacted: tuple[str, ...] = ()


def _without_secrets(kind: AttachmentKind, data: bytes) -> tuple[bytes, tuple[str, ...]]:
    if kind == "text":
        done = redact(data.decode("utf-8"))
        return (done.text.encode("utf-8") if done.changed else data), done.kinds
    return mask(data)


def save(data_dir: Path, session_id: str, files: Sequence[IncomingFile]) -> Stored:
    """Write ``files`` into the session's folder without the secrets in them, and describe
    them (blocking: run it off the I/O loop). Storing the same file twice writes it once."""
    check_files(files)
    if not files:
        return Stored(())
    folder = folder_of(data_dir, session_id)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = []
    found: tuple[str, ...] = ()
    for file in files:
        named = redact(file.name)
        name = safe_name(named.text)
        kind, mime, text, truncated = classify(file)
        data, in_data = _without_secrets(kind, file.data)
        if in_data and kind == "text":  # the model reads what is kept
            text = data.decode("utf-8")
            truncated = len(text) > MAX_TEXT_CHARS
            text = text[:MAX_TEXT_CHARS]
        found = merge(found, merge(named.kinds, in_data))
        path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}-{name}"
        if not path.exists():
            partial = path.with_name(path.name + ".part")
            with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                f.write(data)
            os.replace(partial, path)
        out.append(Attachment(name, mime, str(path), len(data), kind, text, truncated))
    return Stored(tuple(out), found)


def store(data_dir: Path, session_id: str, files: Sequence[IncomingFile]) -> tuple[Attachment, ...]:
    """:func:`save` where nobody is to be told what was taken out (files a tool shares or
    an MCP server returns)."""
    return save(data_dir, session_id, files).files


def erase(data_dir: Path, session_id: str) -> None:
    """A deleted session's files go with it."""
    shutil.rmtree(folder_of(data_dir, session_id), ignore_errors=True)
