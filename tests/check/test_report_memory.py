"""`rlds-reverb report` streams the dataset: its peak memory is flat in the episode count.

Each report runs in a fresh Python process that reads its own peak resident set (`VmHWM`
of /proc/self/status) as it exits. (`getrusage`'s `ru_maxrss` of children is not the
figure: on Linux a child keeps its parent's peak at the fork.) Figures: docs/report.md.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from tests import builders

pytestmark = pytest.mark.slow

# Runs `rlds-reverb report DIR --out OUT --no-progress`; prints the exit code and VmHWM (kB).
_PROBE = """
import re, sys
from rlds_reverb.cli import app
code = app.run(['report', sys.argv[1], '--out', sys.argv[2], '--no-progress'])
status = open('/proc/self/status').read()
print(code, re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))
"""

# Measured (2026-11-25, 2 busy cores), N to 4N episodes: vector +1.1 to +9.4 MiB, images
# +0.7 to +13.6 MiB, of a peak of 496 to 559 MiB (mostly TensorFlow's import). Holding the
# 60 more image episodes would take 70 MiB, the 150 more vector episodes 15 MiB.
_BOUND_MIB = 35.0


def _episodes(count: int, length: int, observation_shape: tuple[int, ...], dtype) -> object:
    """Yields `count` random episodes of `length` steps, one at a time."""
    rng = np.random.default_rng(0)
    last = np.arange(length) == length - 1
    for _ in range(count):
        if dtype == np.uint8:
            observation = rng.integers(0, 256, size=(length, *observation_shape), dtype=np.uint8)
        else:
            observation = rng.standard_normal((length, *observation_shape)).astype(dtype)
        yield {
            types.OBSERVATION: observation,
            types.ACTION: rng.uniform(-1.0, 1.0, (length, 6)).astype(np.float32),
            types.REWARD: rng.standard_normal(length).astype(np.float32),
            types.DISCOUNT: np.ones(length, np.float32),
            types.IS_FIRST: np.arange(length) == 0,
            types.IS_LAST: last,
            types.IS_TERMINAL: last,
        }


def _peak_mib(directory, out, env) -> float:
    result = subprocess.run(
        [sys.executable, '-c', _PROBE, str(directory), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    code, peak_kib = result.stdout.split()[-2:]
    assert code == '0', result.stderr
    return int(peak_kib) / 1024


@pytest.mark.parametrize(
    'count, length, observation_shape, dtype',
    [
        (50, 1000, (17,), np.float32),  # HalfCheetah-like: 50 vs 200 episodes.
        (20, 100, (64, 64, 3), np.uint8),  # Images: 20 vs 80 episodes.
    ],
    ids=['vector', 'image'],
)
def test_peak_memory_is_flat_in_the_number_of_episodes(
    tmp_path, subprocess_env, count, length, observation_shape, dtype
):
    features = builders.step_features(
        **{
            types.OBSERVATION: tfds.features.Tensor(shape=observation_shape, dtype=dtype),
            types.ACTION: tfds.features.Tensor(shape=(6,), dtype=np.float32),
        }
    )
    peaks = {}
    for episodes in (count, 4 * count):
        directory = builders.write_tfds(
            tmp_path,
            _episodes(episodes, length, observation_shape, dtype),
            name=f'memory_{episodes}',
            features=features,
        )
        peaks[episodes] = _peak_mib(directory, tmp_path / f'{episodes}.html', subprocess_env)
    assert peaks[4 * count] - peaks[count] < _BOUND_MIB, peaks
