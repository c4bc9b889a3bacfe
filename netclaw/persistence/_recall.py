"""Hybrid recall, shared by both memory stores: keyword ranks (FTS5 / tsvector) fused with
vector similarity under a relevance floor, and what a new memory is to the ones already there.

The vectors of live memories are held in memory, per audience (:class:`VectorIndex`) and
scored with numpy: measured against reading them from the database for every recall, it
is what keeps recall within its budget (bench/memory.py). The database keeps each vector
and its model (the source of truth; the index is rebuilt from it at open).

Pure functions and a plain data structure: no I/O here. The numbers below were set on
bench/data/memory.json (bench/memory.py prints what they give).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]

CANDIDATES = 20  # from each ranking (keywords, vectors), before fusion
# A keyword hit's bonus: up to this much added to its similarity (the best keyword rank
# gets all of it, the CANDIDATES-th almost none).
KEYWORD_BONUS = 0.05
# A memory is recalled only when its score (similarity plus any keyword bonus) is at least
# this (bench/memory.py: below it, unrelated memories outnumber related ones)...
SIMILARITY_FLOOR = 0.40
# ...and not much below the best one's: next to a close match, a distant one is noise.
RELATIVE_MARGIN = 0.12
# Among the memories recalled, the one told, confirmed or recalled more recently comes
# first: up to this much added to its score for ordering (never to pass the floor), halving
# every RECENCY_HALF_LIFE_DAYS. Small: a tie-breaker between memories about as close.
RECENCY_BONUS = 0.02
RECENCY_HALF_LIFE_DAYS = 30.0
# Writes: a memory this close to an existing one of its audience, with none of its words
# new, says nothing new (nor does one merely as close as a change, with the same words)...
DUPLICATE_SIMILARITY = 0.93
# ...and one this close that repeats most of its subject's words states a changed fact.
# Strict on purpose (bench/memory.py: no wrong supersession on its data set): what this
# misses, the model can say (the remember tool's ``replaces``).
SUPERSEDE_SIMILARITY = 0.80
SUPERSEDE_OVERLAP = 0.55  # the old memory's distinctive words the new one repeats

_WORD = re.compile(r"[^\W_]+")
# Words that say nothing about what a memory is about (a changed fact keeps its subject).
_FILLER = frozenset(
    """
    a an the is are was were be been being am has have had do does did to of in on at by for
    with from as and or but not no now still also just then than that this these those it its
    user user's users he she they them his her their we our you your i me my mine
    currently anymore any longer instead new old again moved changed switched starting since
    note remember fyi
    """.split()
)


class VectorIndex:
    """The vectors of live memories, by audience, each row with its id and scope.

    Rows are appended (the arrays grow by doubling) and dropped in place (id -1, vector
    zeroed), so a reader that took a part's arrays in another thread sees either state of a
    row, never a torn array; callers re-check what they fetch (a dropped memory is gone
    from the database too)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._parts: dict[str, _Part] = {}
        self._where: dict[int, tuple[str, int]] = {}  # id -> (audience, row)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._where

    def put(
        self, memory_id: int, audience: str, scope: str | None, vector: Vector, fresh: float = 0.0
    ) -> None:
        """Index a memory; ``fresh``: when it was last told, confirmed or recalled (unix s)."""
        if memory_id in self._where:
            self.drop(memory_id)
        part = self._parts.get(audience)
        if part is None:
            part = self._parts[audience] = _Part(self.dim)
        self._where[memory_id] = (audience, part.append(memory_id, scope, vector, fresh))

    def touch(self, memory_id: int, when: float) -> None:
        """It was confirmed or recalled at ``when``."""
        found = self._where.get(memory_id)
        if found is not None:
            part, row = self._parts[found[0]], found[1]
            part.fresh[row] = max(part.fresh[row], when)

    def freshness(self, ids: Iterable[int]) -> dict[int, float]:
        """When each indexed id was last told, confirmed or recalled."""
        out: dict[int, float] = {}
        for memory_id in ids:
            found = self._where.get(memory_id)
            if found is not None:
                out[memory_id] = float(self._parts[found[0]].fresh[found[1]])
        return out

    def drop(self, memory_id: int) -> None:
        found = self._where.pop(memory_id, None)
        if found is not None:
            self._parts[found[0]].clear(found[1])

    def nearest(
        self, query: Vector, audience: str | None, scope: str | None, k: int
    ) -> list[tuple[int, float]]:
        """The ``k`` most similar live rows (id, cosine), best first: in ``audience`` (all
        when None), made in ``scope`` or audience-wide (any scope when None)."""
        found: list[tuple[int, float]] = []
        for name, part in list(self._parts.items()):  # a copy: the loop may add an audience meanwhile
            if audience is None or name == audience:
                found += part.nearest(query, scope, k)
        found.sort(key=lambda hit: (-hit[1], -hit[0]))
        return found[:k]

    def similarity(self, query: Vector, ids: Iterable[int]) -> dict[int, float]:
        """Cosine of each indexed id's vector with the query (ids not indexed are left out)."""
        out: dict[int, float] = {}
        for memory_id in ids:
            found = self._where.get(memory_id)
            if found is not None:
                out[memory_id] = float(self._parts[found[0]].vectors[found[1]] @ query)
        return out


class _Part:
    __slots__ = ("count", "fresh", "ids", "scope_codes", "scopes", "vectors")

    def __init__(self, dim: int) -> None:
        self.vectors: Vector = np.zeros((64, dim), dtype=np.float32)
        self.ids = np.full(64, -1, dtype=np.int64)
        self.fresh = np.zeros(64, dtype=np.float64)
        self.scope_codes = np.zeros(64, dtype=np.int32)
        self.scopes: dict[str | None, int] = {None: 0}
        self.count = 0

    def append(self, memory_id: int, scope: str | None, vector: Vector, fresh: float) -> int:
        if self.count == len(self.ids):  # grow: new arrays, so a reader's old ones stay whole
            size = 2 * len(self.ids)
            vectors = np.zeros((size, self.vectors.shape[1]), dtype=np.float32)
            vectors[: self.count] = self.vectors[: self.count]
            ids = np.full(size, -1, dtype=np.int64)
            ids[: self.count] = self.ids[: self.count]
            codes = np.zeros(size, dtype=np.int32)
            codes[: self.count] = self.scope_codes[: self.count]
            fresh_ = np.zeros(size, dtype=np.float64)
            fresh_[: self.count] = self.fresh[: self.count]
            self.vectors, self.ids, self.scope_codes, self.fresh = vectors, ids, codes, fresh_
        row = self.count
        self.vectors[row] = vector
        self.fresh[row] = fresh
        self.scope_codes[row] = self.scopes.setdefault(scope, len(self.scopes))
        self.ids[row] = memory_id  # last: the row is live once it has its id
        self.count += 1
        return row

    def clear(self, row: int) -> None:
        self.ids[row] = -1
        self.vectors[row] = 0.0

    def nearest(self, query: Vector, scope: str | None, k: int) -> list[tuple[int, float]]:
        n = self.count
        vectors, ids, codes = self.vectors[:n], self.ids[:n], self.scope_codes[:n]
        if not n:
            return []
        # einsum, not `@`: numpy's own loop on this thread. BLAS's gemv wakes its thread pool
        # for each call, which on a busy machine costs milliseconds (bench/memory.py: p50 at
        # 10,000 memories 8 ms with `@`, under 1 ms with einsum).
        scores = np.einsum("ij,j->i", vectors, query)
        live = ids >= 0
        if scope is not None:
            code = self.scopes.get(scope)
            live &= (codes == 0) if code is None else ((codes == 0) | (codes == code))
        scores = np.where(live, scores, -np.inf)
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        return [(int(ids[i]), float(scores[i])) for i in top if live[i]]


def fuse(
    keyword_ids: Sequence[int],
    similar: Sequence[tuple[int, float]],
    similarity: Mapping[int, float],
    *,
    limit: int,
    embedded: bool = True,
    complete: Collection[int] = (),
    fresh: Mapping[int, float] | None = None,
    now: float = 0.0,
) -> list[int]:
    """Ids to recall, best first. Each candidate (from either ranking) scores its cosine
    similarity to the query plus a bonus when the query's words found it too (more for a
    better keyword rank); what scores under the floor, or well under the best, is left out.
    ``similarity`` has the cosine of every candidate that has a vector; a keyword hit
    without one (not embedded yet: the model changed) scores as if at the floor, so it is
    found by its words meanwhile; so does one with every word of the query in it
    (``complete``: "runbook" finds the runbook entries however much else they say).
    ``embedded=False``: no vectors at all (embeddings off, or
    no word of the query is known to the model): the keyword ranking as it is.
    ``fresh`` (id -> when last told, confirmed or recalled) and ``now`` order what is
    recalled: a recency bonus, for ordering only (what the floor and the margin leave out
    stays out)."""
    if not embedded:
        return list(keyword_ids[:limit])
    score: dict[int, float] = {memory_id: cosine for memory_id, cosine in similar}
    for rank, memory_id in enumerate(keyword_ids):
        bonus = KEYWORD_BONUS * (1 - rank / max(CANDIDATES, len(keyword_ids)))
        cosine = similarity.get(memory_id, SIMILARITY_FLOOR)
        if memory_id in complete:
            cosine = max(cosine, SIMILARITY_FLOOR)
        score[memory_id] = cosine + bonus
    kept = {i: v for i, v in score.items() if v >= SIMILARITY_FLOOR}
    if not kept:
        return []
    best = max(kept.values())
    fresh = fresh or {}

    def order(memory_id: int) -> tuple[float, int]:
        when = fresh.get(memory_id)
        recency = 0.0
        if when is not None:
            age_days = max(0.0, now - when) / 86_400
            recency = RECENCY_BONUS * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
        return (-(kept[memory_id] + recency), -memory_id)

    ranked = sorted((i for i, v in kept.items() if v >= best - RELATIVE_MARGIN), key=order)
    return ranked[:limit]


@dataclass(frozen=True, slots=True)
class WriteDecision:
    """What a new memory is to its audience's existing ones: ``add`` it, a ``duplicate`` of
    ``existing`` (not added), or a changed fact that ``supersede``s ``existing``."""

    action: Literal["add", "duplicate", "supersede"]
    existing: int | None = None


def subject_words(text: str) -> frozenset[str]:
    """The words of a memory that say what it is about (casefolded, no filler)."""
    return frozenset(w for w in (m.group().casefold() for m in _WORD.finditer(text)) if w not in _FILLER)


def decide_write(text: str, neighbours: Sequence[tuple[int, str, float]]) -> WriteDecision:
    """``neighbours``: the most similar live memories of the audience (id, text, cosine),
    best first. A near duplicate is not added again; a close one whose distinctive words
    the new text mostly repeats, but not all of them, is the same subject with a changed
    value ("Anna works at St. Mary's" -> "Anna now works at the city hospital"), or the
    same fact told with more detail."""
    new_words = subject_words(text)
    for memory_id, old_text, cosine in neighbours:
        old_words = subject_words(old_text)
        if new_words <= old_words and (
            cosine >= DUPLICATE_SIMILARITY or (cosine >= SUPERSEDE_SIMILARITY and new_words)
        ):
            return WriteDecision("duplicate", memory_id)  # says nothing the old one does not
        if cosine < SUPERSEDE_SIMILARITY or not old_words:
            continue
        kept = len(old_words & new_words) / len(old_words)
        if kept >= SUPERSEDE_OVERLAP and old_words != new_words:
            return WriteDecision("supersede", memory_id)
    return WriteDecision("add")
