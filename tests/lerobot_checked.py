"""The datasets this project writes for LeRobot 0.6.1 to read back (the write side's check).

`write_checked(directory)` writes `checked-image/` and `checked-video/` with
`rlds_reverb.save_as_lerobot` from a small robot dataset (`tests/lerobot_data.py`: two
cameras, 7-d state and action, tasks, both endings, lengths 1 to 40, several files), and
`expected.npz`: what the source holds per frame and what `rlds_reverb.load` reads back.
`tests/fixtures/lerobot/check_written.py` (run in LeRobot's scratch venv) then loads both
with `LeRobotDataset` and commits what it returned to `tests/fixtures/lerobot/reference/`
(`written-image.*`, `written-video.*`); `tests/export/test_lerobot_checked.py` writes the
datasets again, checks that the files are the ones LeRobot read (SHA-256 of each), and
compares what `load` reads with what LeRobot returned.

    .venv/bin/python -m tests.lerobot_checked /tmp/lerobot-checked
    /tmp/lerobot-venv/bin/python tests/fixtures/lerobot/check_written.py /tmp/lerobot-checked
"""

from __future__ import annotations

import hashlib
import pathlib
import sys

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.export import lerobot
from rlds_reverb.read import lerobot_meta
from tests import lerobot_data

SPEC = lerobot_data.RobotSpec(
    lengths=(12, 1, 40, 7, 23, 3, 31, 2, 18, 9, 26, 5),
    terminated=(True, False, True, False, True, True, False, False, True, False, True, False),
    seed=33,
)
FPS = 10
FRAMES_PER_FILE = 60  # Several data and video files.
MODES = {'image': types.CameraMode.IMAGE, 'video': types.CameraMode.VIDEO}
CAMERAS = ('front', 'wrist')
# Files whose bytes depend on where and when they were written (not read by LeRobot).
UNHASHED = (lerobot_meta.RECORD,)


def as_dataset(episodes: list[dict]) -> tf.data.Dataset:
    """The NumPy episodes as an RLDS dataset (whole-episode tensors)."""
    first = episodes[0]
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec([None, *np.asarray(a).shape[1:]], tf.as_dtype(_dtype(a))),
        first[types.STEPS],
    )
    metadata = tf.nest.map_structure(
        lambda a: tf.TensorSpec(np.asarray(a).shape, tf.as_dtype(_dtype(a))),
        first[lerobot_data.METADATA],
    )
    whole = tf.data.Dataset.from_generator(
        lambda: iter(episodes),
        output_signature={types.STEPS: signature, lerobot_data.METADATA: metadata},
    )
    return episodes_lib.from_whole_episodes(whole)


def _dtype(array) -> np.dtype:
    array = np.asarray(array)
    return np.dtype(object) if array.dtype.kind in 'OSU' else array.dtype


def hash_files(root: pathlib.Path) -> dict[str, str]:
    """SHA-256 of every file of a dataset but our record, by relative path."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob('*'))
        if path.is_file() and str(path.relative_to(root)) not in UNHASHED
    }


def write_dataset(directory: pathlib.Path, mode: str) -> lerobot.LeRobotSaveStats:
    """Writes `checked-<mode>` from `SPEC` into `directory`."""
    return lerobot.save_as_lerobot(
        as_dataset(lerobot_data.make_episodes(SPEC)),
        directory / f'checked-{mode}',
        fps=FPS,
        cameras=MODES[mode],
        names={'observation.state': lerobot_data.JOINTS, 'action': lerobot_data.JOINTS},
        robot_type='so100_follower',
        frames_per_file=FRAMES_PER_FILE,
    )


def _frame_hashes(frames: np.ndarray) -> np.ndarray:
    return np.asarray(
        [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames]
    )


def expected_values(directory: pathlib.Path) -> dict[str, np.ndarray]:
    """What the source holds per frame, and what `load` reads back from each dataset."""
    from rlds_reverb.read import loading

    source = lerobot_data.make_episodes(SPEC)
    steps = [e[types.STEPS] for e in source]
    out = {
        'observation.state': np.concatenate([s['observation']['state'] for s in steps]),
        'action': np.concatenate([s[types.ACTION] for s in steps]),
        'observation.gripper': np.concatenate([s['observation']['gripper'] for s in steps]),
        'next.reward': np.concatenate([s[types.REWARD] for s in steps]),
        'next.done': np.concatenate([s[types.IS_TERMINAL] for s in steps]),
        'discount': np.concatenate([s[types.DISCOUNT] for s in steps]),
        'grasped': np.concatenate([s[lerobot_data.GRASPED] for s in steps]),
        'task': np.asarray(
            [t.decode() for s in steps for t in s[types.LANGUAGE_INSTRUCTION]], dtype=str
        ),
        'episode_index': np.concatenate(
            [np.full(len(s[types.IS_FIRST]), e) for e, s in enumerate(steps)]
        ),
    }
    for camera in CAMERAS:
        frames = np.concatenate([s['observation']['images'][camera] for s in steps])
        out[f'source_sha256/observation.images.{camera}'] = _frame_hashes(frames)
        out[f'source/observation.images.{camera}'] = frames
    for mode in MODES:
        read = episodes_lib.to_whole_episodes(loading.load(directory / f'checked-{mode}'))
        episodes = list(read.as_numpy_iterator())
        for camera in CAMERAS:
            frames = np.concatenate(
                [e[types.STEPS]['observation']['images'][camera] for e in episodes]
            )
            out[f'loaded_sha256/{mode}/observation.images.{camera}'] = _frame_hashes(frames)
    return out


def stats_cases() -> dict[str, np.ndarray]:
    """Arrays whose statistics LeRobot's own functions compute in the scratch check.

    Keys are `<kind>/<name>`: `numeric` arrays as LeRobot's writer stacks a feature's
    frames, `image` uint8 `[T, H, W, C]` frames (larger than 300 pixels a side: LeRobot
    samples and downsamples them).
    """
    rng = np.random.default_rng(2026)
    frames = rng.integers(0, 256, size=(130, 240, 320, 3), dtype=np.uint8)
    frames[:, :120] //= 2
    return {
        'numeric/float32-vectors': rng.normal(size=(200, 7)).astype(np.float32),
        'numeric/float32-scalars': rng.normal(size=200).astype(np.float32) * 1e3,
        'numeric/float64-vectors': rng.normal(size=(50, 3)),
        'numeric/int64': rng.integers(-5, 10**6, size=(77, 2)),
        'numeric/bool': rng.random(40) < 0.2,
        'numeric/one-frame': rng.normal(size=(1, 4)).astype(np.float32),
        'numeric/one-bool': np.array([True]),
        'numeric/constant': np.full((9, 2), 3.5, np.float32),
        'image/large': frames,
        'image/one-frame': frames[:1, :64, :48],
        'image/grey': frames[:20, :32, :32, :1],
    }


def write_checked(directory: pathlib.Path) -> None:
    """Writes both datasets and `expected.npz` (with `stats_cases`) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        stats = write_dataset(directory, mode)
        print(f'{mode}: {stats.episodes} episodes, {stats.frames} frames, PSNR {stats.psnr_db}')
    cases = {f'stats_cases/{k}': v for k, v in stats_cases().items()}
    np.savez(directory / 'expected.npz', **expected_values(directory), **cases)


if __name__ == '__main__':
    write_checked(pathlib.Path(sys.argv[1]))
