"""The CLI prints only its own output: no empty progress bar, no TFDS warnings (issue 20, 7)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from tests import builders


def test_export_errors_print_no_progress_bar(tmp_path, run_cli):
    # tqdm draws `0 steps [00:00, ? steps/s]` as soon as a bar is made.
    code, out, err = run_cli(
        'export', '--checkpoint', tmp_path, '--table', 'replay', tmp_path / 'o'
    )
    assert code == 2 and out == ''
    assert err.count('\n') == 1 and err.startswith('rlds-reverb export: error: ')
    assert 'no complete Reverb checkpoint' in err and 'steps/s' not in err


def _write_image_dataset(data_dir):
    """Two episodes of uint8 image observations, written by TFDS's own writer."""
    rng = np.random.default_rng(0)
    features = builders.step_features(**{types.OBSERVATION: tfds.features.Image(shape=(4, 4, 3))})

    def _episode(length: int) -> dict:
        pixels = rng.integers(0, 256, size=(length, 4, 4, 3), dtype=np.uint8)
        steps = builders.episode(length, observation=pixels)
        return {
            types.STEPS: [tf.nest.map_structure(lambda x, i=i: x[i], steps) for i in range(length)]
        }

    tfds.dataset_builders.store_as_tfds_dataset(
        name='pixels',
        version='1.0.0',
        features=features,
        split_datasets={'train': [('0', _episode(3)), ('1', _episode(5))]},
        data_dir=str(data_dir),
        disable_shuffling=True,
    )
    return data_dir / 'pixels' / '1.0.0'


@pytest.mark.slow  # Two programs: about 10 s each here.
def test_info_and_validate_print_no_tfds_warnings_on_images(tmp_path, run_cli, subprocess_env):
    # TFDS's own image decoder reads `FeatureConnector.dtype`, which warns through absl.
    directory = _write_image_dataset(tmp_path)
    env = {k: v for k, v in subprocess_env.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
    code, out, err = run_cli('info', directory, subprocess=True, timeout=180, env=env)
    assert code == 0 and err == '', err
    assert out.startswith('source: ') and 'observation: uint8[4, 4, 3]' in out
    code, out, err = run_cli('validate', directory, subprocess=True, timeout=180, env=env)
    assert code == 0 and err == '', err
    assert out.startswith('episodes: 2 (valid 2, invalid 0)') and out.count('\n') == 1
