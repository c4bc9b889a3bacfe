"""Embeddings for memory recall: text to a unit vector, offline by default.

The default model is WordLlama's ``l2_supercat`` (static token embeddings distilled from
Llama 2's, mean-pooled), whose weights ship inside the ``wordllama`` wheel: it works on a
fresh machine with no model server and no download. bench/memory.py measured it (recall
and cost figures there); a call costs tens of microseconds of CPU, so it needs no GPU and
no service. The files are read directly (tokenizers + safetensors) rather than through
``wordllama``'s own loader, which looks for its tokenizer in the wrong folder, falls back
to downloading it, and configures the root logger when imported.

An ``Embedder`` is synchronous CPU work: callers run it off the I/O loop
(``asyncio.to_thread``). ``model`` names the model and its size; it is stored with each
vector, so a change of model is seen and the old vectors re-embedded.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, get_args

import numpy as np
import numpy.typing as npt

from netclaw.config import MemoryConfig
from netclaw.errors import NetclawError

Vectors = npt.NDArray[np.float32]
EmbeddingsName = str  # one of EMBEDDINGS (memory.embeddings)
EMBEDDINGS: tuple[str, ...] = get_args(MemoryConfig.model_fields["embeddings"].annotation)
DEFAULT_EMBEDDINGS: EmbeddingsName = MemoryConfig().embeddings

_WEIGHTS = "l2_supercat_256.safetensors"
_TOKENIZER = "l2_supercat_tokenizer_config.json"
_BATCH = 64  # texts per padded batch: bounds the (batch, tokens, dim) temporary
_MAX_TOKENS = 512  # a memory is at most 2000 chars; a query is cut here too


class EmbeddingsUnavailable(NetclawError):
    """The configured embedding model cannot be loaded."""


class Embedder(Protocol):
    @property
    def model(self) -> str:
        """The model and its size, e.g. ``wordllama-l2_supercat-256``: stored with each vector."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-length float32 row per text (a text with no known token: all zeros)."""
        ...


class StaticEmbedder:
    """Mean-pooled static token embeddings of the lower-cased text (WordLlama's way, but
    case-blind), optionally truncated to the
    first ``dim`` components (the model was trained Matryoshka-style: a prefix is a
    smaller model of its own)."""

    def __init__(self, weights: Path, tokenizer: Path, dim: int, name: str) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        table = load_file(str(weights))["embedding.weight"]
        if dim > table.shape[1]:
            raise EmbeddingsUnavailable(f"{weights.name} has {table.shape[1]} dimensions, not {dim}")
        self._table: Vectors = np.ascontiguousarray(table[:, :dim], dtype=np.float32)
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(_MAX_TOKENS)
        self._dim = dim
        self._model = name
        self._lock = threading.Lock()  # the tokenizer's settings are shared state; keep calls apart

    @property
    def model(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(texts), _BATCH):
            # Lower-cased: Llama's tokens are case-sensitive, and "ANNA WORKS…" would land far
            # from "Anna works…" (bench/memory.py: casing variants were stored as new memories).
            chunk = [text.lower() for text in texts[start : start + _BATCH]]
            with self._lock:
                encoded = self._tokenizer.encode_batch(chunk, add_special_tokens=False)
            for offset, enc in enumerate(encoded):
                ids = np.asarray(enc.ids, dtype=np.int64)
                if ids.size:
                    np.clip(ids, 0, self._table.shape[0] - 1, out=ids)
                    out[start + offset] = self._table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


def _wordllama_files() -> tuple[Path, Path]:
    # find_spec locates the package without importing it (its __init__ configures logging).
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingsUnavailable(
            "the default memory embeddings need the wordllama package (pip install wordllama), "
            'or set memory.embeddings to "none" for keyword recall only'
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    weights, tokenizer = root / "weights" / _WEIGHTS, root / "tokenizers" / _TOKENIZER
    for path in (weights, tokenizer):
        if not path.is_file():
            raise EmbeddingsUnavailable(f"{path} is missing from the wordllama package; reinstall it")
    return weights, tokenizer


@functools.cache
def load_embedder(name: EmbeddingsName) -> Embedder | None:
    """The embedder ``name`` names (memory.embeddings), loaded once per process (~0.5 s, 16 MB
    of weights); None for ``"none"``. Blocking: call it off the loop."""
    if name == "none":
        return None
    if name in ("wordllama-256", "wordllama-64"):
        dim = int(name.rsplit("-", 1)[1])
        weights, tokenizer = _wordllama_files()
        return StaticEmbedder(weights, tokenizer, dim, f"wordllama-l2_supercat-{dim}")
    raise EmbeddingsUnavailable(
        f"unknown memory.embeddings {name!r}; expected one of {', '.join(EMBEDDINGS)}"
    )
