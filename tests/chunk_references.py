"""Plain NumPy references for histories and action chunks (docs/semantics.md §12).

Three references, each written from its own public definition, one step at a time or with
the reference's own index arithmetic, so that each is obviously what it claims to be:

* `reference_chunks`: ours, straight from the definitions of §12 (a Python loop over steps);
* `octo_chunk_act_obs`: Octo's `chunk_act_obs` (octo/data/traj_transforms.py, as published
  at octo-models/octo cdee00c): histories floored at the first step, chunks clamped at the
  last, every history step given its own chunk (`[T, W, H, A]`), `timestep_pad_mask` (true
  on real history steps) and `task_completed` from its own formula;
* `lerobot_frames`: LeRobot's `delta_timestamps` query (`LeRobotDataset._get_query_indices`
  with `get_delta_indices`): offsets round(delta · fps), indices clamped into the
  frame's episode, `{key}_is_pad` true outside it.

`octo_as_ours` and `lerobot_as_ours` state the mapping between their outputs and ours
(docs/semantics.md §12, "Octo and LeRobot"); the tests check it on random episodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlds_reverb.core import types

# --- Ours --------------------------------------------------------------------------------


def _leaves_at(nest, index: int):
    if isinstance(nest, dict):
        return {k: _leaves_at(v, index) for k, v in nest.items()}
    return nest[index]


def _stack(rows: list):
    if isinstance(rows[0], dict):
        return {k: _stack([r[k] for r in rows]) for k in rows[0]}
    return np.stack(rows)


def _zero_like(nest):
    if isinstance(nest, dict):
        return {k: _zero_like(v) for k, v in nest.items()}
    return np.zeros_like(nest)


def _position(steps, s: int, pad: bool, edge: int, fill: str):
    """The value at step s: itself, or for a padded position the edge step's or zeros."""
    if not pad:
        return _leaves_at(steps, s)
    value = _leaves_at(steps, edge)
    return value if fill == 'edge' else _zero_like(value)


def reference_chunks(
    steps: dict,
    history: int,
    horizon: int,
    *,
    history_fields: Sequence[str] = (types.OBSERVATION,),
    chunk_fields: Sequence[str] = (types.ACTION,),
    final_action: str = 'ignored',
    fill: str = 'edge',
) -> dict:
    """Returns one episode's steps as `adders.chunks` gives them, one step at a time."""
    size = len(steps[types.IS_FIRST])
    last = size - 1
    terminal = bool(steps[types.IS_TERMINAL][last])
    end = last if final_action == 'recorded' else last - 1  # E, the last real action.
    out = {k: [] for k in steps}
    masks = {
        f: []
        for f in (
            types.HISTORY_IS_PAD,
            types.CHUNK_IS_PAD,
            types.CHUNK_IS_TRUNCATED,
            types.CHUNK_IS_TERMINATED,
        )
    }
    for t in range(size):
        history_steps = [t - history + 1 + i for i in range(history)]
        chunk_steps = [t + j for j in range(horizon)]
        history_pad = [s < 0 for s in history_steps]
        chunk_pad = [s > end for s in chunk_steps]
        for field in steps:
            if field in history_fields:
                out[field].append(
                    _stack(
                        [
                            _position(steps[field], s, pad, 0, fill)
                            for s, pad in zip(history_steps, history_pad, strict=True)
                        ]
                    )
                )
            elif field in chunk_fields:
                edge = max(end, 0)
                out[field].append(
                    _stack(
                        [
                            _position(steps[field], s, pad, edge, fill)
                            for s, pad in zip(chunk_steps, chunk_pad, strict=True)
                        ]
                    )
                )
            else:
                out[field].append(_leaves_at(steps[field], t))
        masks[types.HISTORY_IS_PAD].append(history_pad)
        masks[types.CHUNK_IS_PAD].append(chunk_pad)
        masks[types.CHUNK_IS_TRUNCATED].append([p and not terminal for p in chunk_pad])
        masks[types.CHUNK_IS_TERMINATED].append([p and terminal for p in chunk_pad])
    result = {k: _stack(v) for k, v in out.items()}
    if types.DISCOUNT in result and terminal:  # 0 into and on the terminal step.
        discount = np.array(result[types.DISCOUNT], copy=True)
        discount[max(last - 1, 0) :] = 0
        result[types.DISCOUNT] = discount
    return {**result, **{k: np.asarray(v, bool) for k, v in masks.items()}}


# --- Octo --------------------------------------------------------------------------------


def octo_chunk_act_obs(
    observation: dict, action: np.ndarray, window_size: int, action_horizon: int
) -> dict:
    """Octo's `chunk_act_obs` on one trajectory without a goal timestep, in NumPy.

    Returns `observation` (each key `[T, W, ...]`, plus `timestep_pad_mask` and
    `task_completed`), `action` (`[T, W, H, A]`) and `action_pad_mask` (`[T, W, H, A]`,
    from an all-true input mask as Octo's `pad_actions_and_proprio` makes it).
    """
    size = len(action)
    history_index = np.arange(size)[:, None] + np.arange(1 - window_size, 1)[None, :]
    timestep_pad_mask = history_index >= 0
    history_index = np.maximum(history_index, 0)
    observed = {k: np.asarray(v)[history_index] for k, v in observation.items()}
    chunk_index = np.arange(size)[:, None] + np.arange(action_horizon)[None, :]
    chunked = np.asarray(action)[np.minimum(chunk_index, size - 1)]  # [T, H, A]
    chunked = chunked[history_index]  # [T, W, H, A]
    goal_timestep = np.full(size, size - 1)
    t, w, h = np.meshgrid(
        np.arange(size), np.arange(window_size), np.arange(action_horizon), indexing='ij'
    )
    # Octo's own formula, as published.
    relative_goal_timestep = goal_timestep[:, None, None] - (t - (window_size + 1) + w + h)
    task_completed = relative_goal_timestep <= 0
    action_pad_mask = np.ones_like(action, bool)[:, None, None, :] & ~task_completed[..., None]
    return {
        'observation': {
            **observed,
            'timestep_pad_mask': timestep_pad_mask,
            'task_completed': task_completed,
        },
        'action': chunked,
        'action_pad_mask': action_pad_mask,
    }


def octo_as_ours(octo: dict, window_size: int, action_horizon: int) -> dict:
    """Our fields (`final_action='recorded'`, EDGE) read off Octo's output, by the mapping.

    History: Octo's observation keys and `timestep_pad_mask` negated. Chunk: Octo's chunk
    of the current step (history position W - 1) and `task_completed` there, which by
    Octo's formula starts at s = L + 2: ours also marks s = L + 1 (`octo_pad_lags_one`).
    """
    observation = dict(octo['observation'])
    history_pad = ~observation.pop('timestep_pad_mask')
    task_completed = observation.pop('task_completed')[:, window_size - 1]
    size = len(history_pad)
    s = np.arange(size)[:, None] + np.arange(action_horizon)[None, :]
    return {
        types.OBSERVATION: observation,
        types.ACTION: octo['action'][:, window_size - 1],
        types.HISTORY_IS_PAD: history_pad,
        types.CHUNK_IS_PAD: task_completed | (s == size),
    }


# --- LeRobot -----------------------------------------------------------------------------


def lerobot_delta_indices(delta_timestamps: dict[str, list[float]], fps: int) -> dict:
    """LeRobot's `get_delta_indices`: each delta in seconds, as a whole number of frames."""
    return {key: [round(d * fps) for d in deltas] for key, deltas in delta_timestamps.items()}


def lerobot_frames(frames: dict[str, np.ndarray], lengths: Sequence[int], delta_indices: dict):
    """Every frame of a LeRobot dataset (episodes end to end) queried at `delta_indices`.

    Returns `{key: [N, D, ...], f'{key}_is_pad': [N, D]}` for every frame index in order.
    """
    ends = np.cumsum(lengths)
    starts = ends - np.asarray(lengths)
    out: dict[str, list] = {}
    for episode, (ep_start, ep_end) in enumerate(zip(starts, ends, strict=True)):
        del episode
        for index in range(ep_start, ep_end):
            for key, deltas in delta_indices.items():
                query = [max(ep_start, min(ep_end - 1, index + d)) for d in deltas]
                pad = [(index + d < ep_start) or (index + d >= ep_end) for d in deltas]
                out.setdefault(key, []).append(frames[key][query])
                out.setdefault(f'{key}_is_pad', []).append(np.asarray(pad, bool))
    return {k: np.stack(v) for k, v in out.items()}


def lerobot_delta_timestamps(history: int, horizon: int, fps: int) -> dict:
    """The `delta_timestamps` that ask LeRobot for our history (`observation`) and chunk."""
    return {
        types.OBSERVATION: [(i - history + 1) / fps for i in range(history)],
        types.ACTION: [j / fps for j in range(horizon)],
    }


def lerobot_as_ours(frames: dict) -> dict:
    """Our fields (`final_action='recorded'`, EDGE) read off LeRobot's, by the mapping."""
    return {
        types.OBSERVATION: frames[types.OBSERVATION],
        types.ACTION: frames[types.ACTION],
        types.HISTORY_IS_PAD: frames[f'{types.OBSERVATION}_is_pad'],
        types.CHUNK_IS_PAD: frames[f'{types.ACTION}_is_pad'],
    }
