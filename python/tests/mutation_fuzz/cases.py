"""What a case reads (:data:`Selection` and the selections drawn) and the case itself: an array,
a mutation and the reads of the mutated copy, derived from ``(seed, iteration)`` alone."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from types import EllipsisType
from typing import Sequence, Union

from .arrays import StoredArray
from .edits import Mutation
from .mutations import Mutator


# ----------------------------------------------------------------------------------------------
# Selections

Selection = Union[tuple[Union[int, slice], ...], EllipsisType]  # what the fuzzer reads


def _axis_indices(selection: Selection, shape: Sequence[int]) -> list[list[int]]:
    """The indices a (normalized, our own) selection selects along each axis."""
    if selection is Ellipsis:
        return [list(range(n)) for n in shape]
    assert isinstance(selection, tuple)
    out: list[list[int]] = []
    for item, n in zip(selection, shape):
        if isinstance(item, slice):
            out.append(list(range(*item.indices(n))))
        else:
            out.append([item % n])
    out += [list(range(n)) for n in shape[len(selection):]]
    return out


def format_selection(selection: Selection) -> str:
    """The selection as it is written between brackets: ``1:5:2, 3``."""
    if selection is Ellipsis:
        return "..."
    assert isinstance(selection, tuple)
    if not selection:
        return "()"

    def one(item: int | slice) -> str:
        if isinstance(item, slice):
            text = ":".join("" if v is None else str(v) for v in (item.start, item.stop))
            return text + (f":{item.step}" if item.step not in (None, 1) else "")
        return str(item)

    return ", ".join(one(item) for item in selection)


def random_selection(rng: random.Random, shape: Sequence[int]) -> Selection:
    """A random basic selection: per axis a slice (with a step), an integer or everything."""
    if not shape:
        return rng.choice((Ellipsis, ()))
    items: list[int | slice] = []
    for n in shape:
        r = rng.random()
        if r < 0.5:
            a = rng.randrange(n)
            b = rng.randint(a + 1, n)
            items.append(slice(a, b, rng.choice((1, 1, 2, 3))))
        elif r < 0.7:
            items.append(rng.randrange(-n, n))
        else:
            items.append(slice(None))
    return tuple(items)


def chunk_selection(rng: random.Random, arr: StoredArray, key: str | None) -> Selection:
    """One whole (inner) chunk, inside the stored file ``key`` when given."""
    spec = arr.spec
    if not spec.shape:
        return Ellipsis
    storage_index = arr.key_index.get(key) if key is not None else None
    if storage_index is None:
        storage_index = tuple(rng.randrange(n) for n in spec.storage_grid)
    per_file = tuple(s // c for s, c in zip(spec.storage_shape, spec.chunks))
    candidates = []
    for local in itertools.product(*(range(n) for n in per_file)):
        start = [(si * p + li) * c for si, p, li, c in zip(storage_index, per_file, local, spec.chunks)]
        if all(s < n for s, n in zip(start, spec.shape)):
            candidates.append(tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, spec.chunks, spec.shape)))
    return rng.choice(candidates)


# ----------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    """One drawn case: an array, a mutation and the reads of the mutated copy."""

    seed: int
    iteration: int
    array: StoredArray
    mutation: Mutation
    selections: list[Selection]


def draw_case(seed: int, iteration: int, corpus: Sequence[StoredArray], mutator: Mutator) -> Case:
    """The case of ``(seed, iteration)``: depends on nothing else (given the same corpus)."""
    rng = random.Random(f"{seed}:{iteration}")
    while True:
        arr = rng.choice(corpus)
        kind = rng.choice(mutator.applicable(arr))
        mutation = mutator.draw(rng, arr, kind)
        if mutation is not None:
            break
    data_key = None if mutation.is_metadata else mutation.target
    selections: list[Selection] = [Ellipsis, random_selection(rng, arr.spec.shape),
                                   chunk_selection(rng, arr, data_key)]
    return Case(seed, iteration, arr, mutation, selections)
