"""Hybrid recall's pure parts: the in-memory vector index, rank fusion under the relevance
floor, what a new memory is to the existing ones, and the offline embeddings."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.persistence import EmbeddingsUnavailable, load_embedder
from netclaw.persistence._recall import (
    KEYWORD_BONUS,
    RECENCY_BONUS,
    RELATIVE_MARGIN,
    SIMILARITY_FLOOR,
    VectorIndex,
    decide_write,
    fuse,
)


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


# -- the vector index -----------------------------------------------------------------------


def test_nearest_keeps_to_the_audience_and_the_scope() -> None:
    index = VectorIndex(2)
    index.put(1, "personal", None, unit(1, 0))
    index.put(2, "team", None, unit(1, 0))
    index.put(3, "team", "slack:C1", unit(1, 0.1))
    index.put(4, "team", "slack:C2", unit(1, 0.05))
    assert [i for i, _ in index.nearest(unit(1, 0), "personal", None, 5)] == [1]
    assert {i for i, _ in index.nearest(unit(1, 0), "team", "slack:C1", 5)} == {2, 3}
    assert {i for i, _ in index.nearest(unit(1, 0), "team", None, 5)} == {2, 3, 4}
    assert {i for i, _ in index.nearest(unit(1, 0), "team", "slack:unknown", 5)} == {2}  # audience-wide only
    assert {i for i, _ in index.nearest(unit(1, 0), None, None, 5)} == {1, 2, 3, 4}


def test_a_dropped_row_is_never_found_and_a_put_replaces() -> None:
    index = VectorIndex(2)
    index.put(1, "personal", None, unit(1, 0))
    index.put(2, "personal", None, unit(0, 1))
    index.drop(1)
    assert [i for i, _ in index.nearest(unit(1, 0), "personal", None, 5)] == [2]
    assert 1 not in index and len(index) == 1
    index.put(2, "personal", None, unit(1, 0))  # re-embedded
    assert index.nearest(unit(1, 0), "personal", None, 1)[0][1] == pytest.approx(1.0)
    assert index.similarity(unit(1, 0), [1, 2]) == {2: pytest.approx(1.0)}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["personal", "team"]),
            st.sampled_from([None, "a", "b"]),
            st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=3, max_size=3),
            st.booleans(),
        ),
        min_size=1,
        max_size=200,
    ),
    k=st.integers(1, 30),
    scope=st.sampled_from([None, "a", "b"]),
)
def test_nearest_is_the_brute_force_answer(
    rows: list[tuple[str, str | None, list[float], bool]], k: int, scope: str | None
) -> None:
    """Growing, dropping and filtering never lose or invent a row (checked against a plain scan)."""
    index = VectorIndex(3)
    live: dict[int, tuple[str, str | None, np.ndarray]] = {}
    for n, (audience, where, values, dropped) in enumerate(rows):
        vector = np.asarray(values, dtype=np.float32)
        index.put(n, audience, where, vector)
        live[n] = (audience, where, vector)
        if dropped and n % 3 == 0:
            index.drop(n)
            del live[n]
    query = np.asarray([0.3, -0.5, 0.8], dtype=np.float32)
    expected = sorted(
        (
            (i, float(v @ query))
            for i, (a, s, v) in live.items()
            if a == "team" and (scope is None or s in (None, scope))
        ),
        key=lambda hit: -hit[1],
    )[:k]
    got = index.nearest(query, "team", scope, k)
    assert [round(c, 5) for _, c in got] == [round(c, 5) for _, c in expected]
    assert {i for i, _ in got} <= {i for i, (a, _, _) in live.items() if a == "team"}


# -- fusion and the floor -------------------------------------------------------------------


def test_a_keyword_hit_gets_a_bonus_over_an_equally_close_vector_hit() -> None:
    best = SIMILARITY_FLOOR + 0.25
    a_little_less = best - KEYWORD_BONUS / 2  # the top keyword rank's bonus lifts it past best
    similar = [(7, best), (5, best - 0.01), (3, a_little_less)]
    similarity = {7: best, 5: best - 0.01, 3: a_little_less, 9: 0.2}
    ids = fuse([3, 9], similar, similarity, limit=5)
    assert ids == [3, 7, 5]  # 9: its words match, but it is far from the meaning


def test_the_floor_keeps_out_what_is_not_close_enough() -> None:
    below = SIMILARITY_FLOOR - KEYWORD_BONUS - 0.01
    assert fuse([], [(1, SIMILARITY_FLOOR - 0.01)], {1: SIMILARITY_FLOOR - 0.01}, limit=5) == []
    assert fuse([1], [], {1: below}, limit=5) == []  # even the best keyword rank does not lift it
    assert fuse([1], [], {1: below + 0.02}, limit=5) == [1]
    # Not embedded yet (the model changed, re-embedding runs): its words are enough.
    assert fuse([4], [], {}, limit=5) == [4]
    # Every word of the query is in it: enough too, however far its vector.
    assert fuse([1], [], {1: 0.05}, limit=5, complete={1}) == [1]


def test_next_to_a_close_match_a_distant_one_is_left_out() -> None:
    close, far = 0.7, 0.7 - RELATIVE_MARGIN - 0.01
    assert fuse([], [(1, close), (2, far)], {1: close, 2: far}, limit=5) == [1]


def test_among_close_memories_the_fresher_comes_first_but_never_passes_the_floor() -> None:
    now = 1_000_000_000.0
    day = 86_400.0
    close = SIMILARITY_FLOOR + 0.2
    similar = [(1, close), (2, close - 0.005)]
    similarity = dict(similar)
    # Told a year ago against confirmed yesterday: the fresher wins a near tie...
    assert fuse([], similar, similarity, limit=5, fresh={1: now - 365 * day, 2: now - day}, now=now) == [2, 1]
    # ...but not a clear difference in meaning.
    far = close - RECENCY_BONUS - 0.01
    assert fuse([], [(1, close), (2, far)], {1: close, 2: far}, limit=5, fresh={1: 0.0, 2: now}, now=now) == [
        1,
        2,
    ]
    # Below the floor stays out, however fresh.
    below = SIMILARITY_FLOOR - 0.001
    assert fuse([], [(3, below)], {3: below}, limit=5, fresh={3: now}, now=now) == []


def test_without_vectors_the_keyword_ranking_is_used_as_it_is() -> None:
    assert fuse([5, 2, 9], [], {}, limit=2, embedded=False) == [5, 2]


# -- what a write is ------------------------------------------------------------------------


def test_a_near_duplicate_is_a_duplicate_and_a_changed_value_supersedes() -> None:
    old = "Anna, the user's sister, works as a nurse at St. Mary's hospital."
    assert decide_write(
        "User's sister Anna works as a nurse at St. Mary's hospital", [(1, old, 0.97)]
    ).action == ("duplicate")
    changed = decide_write(
        "Anna, the user's sister, now works as a nurse at the city hospital.", [(1, old, 0.81)]
    )
    assert (changed.action, changed.existing) == ("supersede", 1)


def test_another_fact_about_the_same_subject_is_added() -> None:
    assert (
        decide_write(
            "Anna has two children, Leo and Mia.", [(1, "Anna's birthday is on the 14th of March.", 0.8)]
        ).action
        == "add"
    )
    assert (
        decide_write("The user likes jazz.", [(1, "The user likes tea.", 0.5)]).action == "add"
    )  # not close
    assert decide_write("anything", []).action == "add"


# -- the offline embeddings -----------------------------------------------------------------


def test_the_default_embeddings_load_from_the_installed_package_and_find_meaning() -> None:
    embedder = load_embedder("minilm-l6")
    assert embedder is not None and embedder.dim == 384 and embedder.model == "all-MiniLM-L6-v2-int8"
    vectors = embedder.embed(
        [
            "What does my sister do for a living?",
            "Anna, my sister, works as a nurse.",
            "Production runs on kestrel-2.",
        ]
    )
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    shouted, quiet = embedder.embed(["ANNA WORKS AS A NURSE.", "Anna works as a nurse."])
    assert shouted @ quiet == pytest.approx(1.0)  # case-blind: casing is no new memory
    assert load_embedder("none") is None


def test_a_text_embeds_the_same_whatever_it_is_embedded_with() -> None:
    """A memory's stored vector and a query's must not depend on what else was embedded in
    the same call (the int8 layers scale their input per run)."""
    embedder = load_embedder("minilm-l6")
    assert embedder is not None
    texts = [
        "Anna is a nurse.",
        "x",
        "The user's " + "very " * 300 + "long note.",
        "Production runs on kestrel-2.",
    ]
    texts += [f"Note {n}: the cat is called Miso and eats at {n} o'clock." for n in range(40)]
    together = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-6


def test_text_without_a_known_token_is_a_zero_vector_not_an_error() -> None:
    embedder = load_embedder("minilm-l6")
    assert embedder is not None
    assert not embedder.embed([""])[0].any()
    assert not embedder.embed(["   "])[0].any()
    assert embedder.embed([]).shape == (0, 384)


def test_an_unknown_model_name_is_refused_with_the_choices() -> None:
    with pytest.raises(EmbeddingsUnavailable, match="minilm-l6, none"):
        load_embedder("bert-large")


def test_a_damaged_model_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    from netclaw.persistence._embeddings import _MINILM, MiniLMEmbedder

    shutil.copy(_MINILM / "tokenizer.json", tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    embedder = MiniLMEmbedder(tmp_path)  # nothing is read before the first text
    with pytest.raises(EmbeddingsUnavailable, match=r"could not be loaded .*reinstall netclaw"):
        embedder.embed(["hello"])
