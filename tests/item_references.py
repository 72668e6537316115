"""Plain NumPy references of every item kind `push` writes, and exact comparisons with a table.

`reference_items(kind, episodes)` follows the item tables of docs/items.md and
docs/semantics.md §3-§6 one Python step at a time (the n-step and window maths are
`tests/adders/test_adders_properties.py`'s references). Items are compared by *origin*: the
episode and step their first row comes from, read from `observation/state` = [e, t, ...]
(`tests/users_data.py`), so `assert_same_items` shows every missing, extra and duplicated
item, whatever order the table holds them in.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np
import tree

from rlds_reverb.core import types
from rlds_reverb.transform import items as items_lib
from tests import users_data
from tests.adders.test_adders_properties import _window, reference_n_step, reference_sequences

FIRST, MID, LAST = 0, 1, 2


def _terminal_discounts(steps: dict) -> np.ndarray:
    discount = np.array(steps[types.DISCOUNT], copy=True)
    if steps[types.IS_TERMINAL][-1]:
        discount[-2:] = 0  # Into and on the terminal step (docs/semantics.md §3).
    return discount


def _extras(steps: dict) -> dict:
    return {k: v for k, v in steps.items() if k not in types.REQUIRED_STEP_FIELDS}


def reference_trajectories(steps: dict) -> dict:
    """One episode's per-step TF-Agents trajectory fields (docs/deviations.md), `[T]` each."""
    size = len(steps[types.IS_FIRST])
    step_type = np.full(size, MID, np.int32)
    step_type[0] = FIRST
    step_type[-1] = LAST  # A single-step episode is (LAST, LAST).
    # After the last step comes the next episode's FIRST; a single step is (LAST, LAST).
    next_step_type = np.append(step_type[1:], LAST if size == 1 else FIRST).astype(np.int32)
    return {
        'step_type': step_type,
        'observation': steps[types.OBSERVATION],
        'action': steps[types.ACTION],
        'policy_info': _extras(steps) or (),
        'next_step_type': next_step_type,
        'reward': steps[types.REWARD],
        'discount': _terminal_discounts(steps),
    }


def _slice(nest, start: int, stop: int):
    return tree.map_structure(lambda x: x[start:stop], nest)


def _two_step(steps: dict) -> list:
    rows = reference_trajectories(steps)
    return [_slice(rows, t, t + 2) for t in range(len(steps[types.IS_FIRST]) - 1)]


def _n_step(steps: dict, kind: items_lib.NStep) -> list:
    fields = reference_n_step(steps, kind.n, kind.gamma)
    kept = {types.OBSERVATION: steps[types.OBSERVATION], types.ACTION: steps[types.ACTION]}
    rows = {**kept, **fields, **_extras(steps)}
    return [
        tree.map_structure(lambda x, t=t: x[t], rows) for t in range(len(steps[types.IS_FIRST]) - 1)
    ]


def _without_burn_in(window: dict) -> dict:
    return {k: v for k, v in window.items() if k != types.IS_BURN_IN}


def _episode_windows(steps: dict, kind: items_lib.Episode) -> list:
    size = len(steps[types.IS_FIRST])
    rows = {**steps, types.DISCOUNT: _terminal_discounts(steps)}
    split = kind.overflow is items_lib.EpisodeOverflow.SPLIT
    starts = range(0, size, kind.max_length) if split else [0]
    windows = []
    for start in starts:
        window, valid = _window(rows, start, kind.max_length, size)
        windows.append({**window, types.MASK: valid})
    return windows


def _string_padding(leaf: np.ndarray) -> np.ndarray:
    """Null steps hold b'' in string fields (the references' `np.where` puts 0 there)."""
    if not isinstance(leaf, np.ndarray) or leaf.dtype != object:
        return leaf
    values = [v if isinstance(v, bytes) else b'' for v in leaf.reshape(-1)]
    return np.array(values, object).reshape(leaf.shape)


def reference_items(kind: items_lib.ItemKind, episodes: Sequence[dict]) -> list:
    """Returns the items `push(episodes, item=kind)` writes, episode after episode.

    Args:
      kind: Any item kind but `Sequence(end='continue')`.
      episodes: Episodes as `users_data.make_episodes` gives them (`steps` of NumPy arrays).

    Returns:
      The items, each a nest of arrays as the table signature lays it out (two-step items
      as a dict of the `Trajectory` fields).
    """
    result = []
    for episode in episodes:
        steps = episode[types.STEPS]
        if isinstance(kind, items_lib.TwoStep):
            result += _two_step(steps)
        elif isinstance(kind, items_lib.NStep):
            result += _n_step(steps, kind)
        elif isinstance(kind, items_lib.Sequence):
            windows = reference_sequences([steps], kind.length, kind.period, kind.end.value, 0)
            result += [_without_burn_in(w) for w in windows]
        else:
            result += _episode_windows(steps, kind)
    return [tree.map_structure(_string_padding, item) for item in result]


def count_items(kind: items_lib.ItemKind, lengths: Sequence[int]) -> int:
    """The number of items of episodes of these lengths (the reference, counted)."""
    spec = users_data.UsersSpec(tuple(lengths), images=False, strings=False)
    return len(reference_items(kind, users_data.make_episodes(spec)))


# --- Comparing with what a table holds ------------------------------------------------------


def _as_dict(item) -> dict:
    """A two-step `Trajectory` as a dict of its fields; other items as they are."""
    return item._asdict() if hasattr(item, '_asdict') else item


def origin(item) -> tuple[int, int]:
    """(episode, step) of an item's first row, from `observation/state`."""
    state = np.asarray(_as_dict(item)[types.OBSERVATION][users_data.STATE])
    first = state if state.ndim == 1 else state[0]
    return int(first[0]), int(first[1])


def _origins(items: Sequence) -> np.ndarray:
    return np.array([origin(item) for item in items], np.int64).reshape(-1, 2)


def _flat_leaves(items: Sequence, order: np.ndarray) -> dict:
    """Path -> (shapes, all values flattened and concatenated), items taken in `order`."""
    flat = [dict(tree.flatten_with_path(_as_dict(items[i]))) for i in order]
    paths = sorted(flat[0]) if flat else []
    result = {}
    for path in paths:
        leaves = [np.asarray(f[path]) for f in flat]
        values = np.concatenate([leaf.reshape(-1) for leaf in leaves])
        result[path] = ([leaf.shape for leaf in leaves], values)
    return result


def assert_same_items(actual: Sequence, expected: Sequence, *, where: str = '') -> None:
    """Asserts the items are the same, each exactly once (in any order); values to 1e-5.

    Raises:
      AssertionError: Naming the missing, extra and duplicated origins, or the first field
        that differs.
    """
    got_origins, want_origins = _origins(actual), _origins(expected)
    counts = collections.Counter(map(tuple, got_origins.tolist()))
    wanted = collections.Counter(map(tuple, want_origins.tolist()))
    duplicated = sorted(o for o, n in counts.items() if n > 1)
    missing, extra = sorted(wanted - counts), sorted(counts - wanted)
    assert not (duplicated or missing or extra), (
        f'{where}: {len(actual)} items, {len(expected)} expected; duplicated (episode, step) '
        f'{duplicated[:10]}, missing {missing[:10]}, extra {extra[:10]}'
    )
    got = _flat_leaves(actual, np.lexsort(got_origins.T[::-1]))
    want = _flat_leaves(expected, np.lexsort(want_origins.T[::-1]))
    assert sorted(got) == sorted(want), f'{where}: fields {sorted(got)} != {sorted(want)}'
    for path, (shapes, values) in want.items():
        got_shapes, got_values = got[path]
        assert got_shapes == shapes, f'{where} {path}: shapes differ'
        if values.dtype.kind in 'OSU' or got_values.dtype.kind in 'OSU':
            assert got_values.tolist() == values.tolist(), f'{where} {path}'
        else:
            np.testing.assert_allclose(
                got_values.astype(np.float64),
                values.astype(np.float64),
                atol=1e-5,
                err_msg=f'{where} {path}',
            )


def by_origin(episodes: Sequence[dict]) -> dict[int, dict]:
    """`make_episodes` index -> episode (from the metadata id), for data read back in any order."""
    return {int(e[users_data.METADATA][users_data.EPISODE_ID]): e for e in episodes}
