"""`ItemKind.make_flat_referencer`: the writer's flat item equals `reference_item` flattened.

The TrajectoryEngine hands `create_item` the flat list (what Reverb flattens the nest to),
so every kind's flat layout must follow `tree.flatten`'s order of its nested item.
"""

from __future__ import annotations

import numpy as np
import pytest
import tree

from rlds_reverb.core import types
from rlds_reverb.read import frame_fields
from rlds_reverb.transform import items

_ROWS = 12
# Columns standing for a writer's history: row r of a column holds (column, r).
_NAMES = ['action', 'discount', 'observation/image', 'observation/state', 'reward', 'step_type']


def _columns() -> dict:
    leaves = {
        name: np.array([(index, row) for row in range(_ROWS)], dtype=object)
        for index, name in enumerate(_NAMES)
    }
    return frame_fields.merge_fields({}, leaves)


def _nested_item(item, columns, first: int, stop: int):
    """The nested item, written out for n-step items (docs/items.md), else the kind's own."""
    if not isinstance(item, items.NStep):
        return item.reference_item(columns, first, stop)
    nested = tree.map_structure(lambda column: column[first], columns)
    ahead = tree.map_structure(lambda column: column[stop - 1], columns[types.OBSERVATION])
    return {**nested, types.NEXT_OBSERVATION: ahead}


@pytest.mark.parametrize(
    'item',
    [
        items.TwoStep(),
        items.NStep(3, 0.9),
        items.Sequence(4),
        items.Episode(5),
        items.Chunk(2, 3),
    ],
    ids=str,
)
def test_flat_references_equal_the_nested_item_flattened(item):
    columns = _columns()
    referencer = item.make_flat_referencer(columns)
    for first in range(0, _ROWS - item.max_span):
        for stop in range(first + 1, first + item.max_span + 1):
            want = tree.flatten(_nested_item(item, columns, first, stop))
            got = referencer(first, stop)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(
                    np.asarray(g, dtype=object), np.asarray(w, dtype=object)
                )
