"""Embeddings for memory recall: text to a unit vector, offline by default.

The default model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0): a 6-layer BERT
whose sentence vectors know that "what my sister does for a living" is close to "Anna
works as a nurse". It ships inside netclaw as one ONNX graph with int8 weights
(``_models/minilm-l6``, 23 MB, made by scripts/export_minilm.py), so it works on a fresh
machine with no model server and no download; onnxruntime runs it in about 3 ms of CPU
for a sentence, growing with its length (bench/memory.py). A numpy forward pass of the
same weights measured 2.7 times slower. WordLlama's static vectors (the ``wordllama``
wheel) cost a few percent of that but recalled no better than keywords on
bench/memory.py's set (recall@5 0.71 against 0.72), so netclaw does not offer them.

An ``Embedder`` is synchronous CPU work: callers run it off the I/O loop
(``asyncio.to_thread``). ``model`` names the model and its size; it is stored with each
vector, so a change of model is seen and the old vectors re-embedded.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, get_args

import numpy as np
import numpy.typing as npt

from netclaw.config import MemoryConfig
from netclaw.errors import NetclawError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

Vectors = npt.NDArray[np.float32]
EmbeddingsName = str  # one of EMBEDDINGS (memory.embeddings)
EMBEDDINGS: tuple[str, ...] = get_args(MemoryConfig.model_fields["embeddings"].annotation)
DEFAULT_EMBEDDINGS: EmbeddingsName = MemoryConfig().embeddings

_MINILM = Path(__file__).resolve().parent / "_models" / "minilm-l6"
_DIM = 384
_MAX_TOKENS = 256  # the model's positions in _models (a memory is at most 2,000 characters)


class EmbeddingsUnavailable(NetclawError):
    """The configured embedding model cannot be loaded."""


class Embedder(Protocol):
    @property
    def model(self) -> str:
        """The model and its form, e.g. ``all-MiniLM-L6-v2-int8``: stored with each vector."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-length float32 row per text (a blank text: all zeros)."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as one ONNX graph (the encoder, mean pooling over the real tokens,
    unit length), run by onnxruntime on one thread.

    The graph takes a padded batch with its attention mask, but netclaw gives it one text
    at a time (see ``embed``)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()  # the loading, and the tokenizer's shared settings
        # Loaded on first use: a daemon whose sessions have nothing to recall or remember
        # never spends the half second and 80 MB.
        self._loaded: tuple[Any, Tokenizer] | None = None

    def _load(self) -> tuple[Any, Tokenizer]:
        # onnxruntime writes a device id for its telemetry under ~/.cache/Microsoft when it
        # is imported, unless told not to: a daemon writes nothing outside its data_dir (and
        # a unit with ProtectHome= has no home to write to).
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        # One thread: a recall is a few milliseconds of small products, which a second
        # thread barely shortens, and the loop and the journal need the other core.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: its warnings are about graph rewrites
        path = self._root / "model.onnx"
        try:
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(self._root / "tokenizer.json"))
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbeddingsUnavailable(
                f"{path.parent} could not be loaded ({exc}); reinstall netclaw"
            ) from exc
        tokenizer.no_padding()
        tokenizer.enable_truncation(_MAX_TOKENS)
        return session, tokenizer

    @property
    def model(self) -> str:
        return "all-MiniLM-L6-v2-int8"

    @property
    def dim(self) -> int:
        return _DIM

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), _DIM), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            session, tokenizer = self._loaded
            encoded = tokenizer.encode_batch(list(texts))
        for row, enc in enumerate(encoded):
            # One text per run, never a padded batch: the int8 layers quantize their input
            # with one scale per run, so a batch would make a text's vector depend on its
            # neighbours' (measured: cosine 0.97 to itself alone).
            if len(enc.ids) > 2:  # a blank text ([CLS] [SEP] only) stays all zeros
                tokens = np.asarray([enc.ids], dtype=np.int64)
                feed = {"input_ids": tokens, "attention_mask": np.ones(tokens.shape, dtype=np.float32)}
                out[row] = session.run(None, feed)[0][0]
        return out


@functools.cache
def load_embedder(name: EmbeddingsName) -> Embedder | None:
    """The embedder ``name`` names (memory.embeddings), one per process (``minilm-l6`` loads
    its model at its first text: half a second, about 80 MB); None for ``"none"``.
    Blocking: call it off the loop."""
    if name == "none":
        return None
    if name == "minilm-l6":
        for path in (_MINILM / "model.onnx", _MINILM / "tokenizer.json"):
            if not path.is_file():
                raise EmbeddingsUnavailable(f"{path} is missing from netclaw's package; reinstall netclaw")
        return MiniLMEmbedder(_MINILM)
    raise EmbeddingsUnavailable(
        f"unknown memory.embeddings {name!r}; expected one of {', '.join(EMBEDDINGS)}"
    )
