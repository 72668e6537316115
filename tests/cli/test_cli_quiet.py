"""The program starts quietly: the libraries' start-up noise is hidden unless `--verbose`."""

from __future__ import annotations

import pytest

# Lines the libraries print at start-up on a machine without a GPU (TensorFlow, XLA's CUDA
# plugin registration, Gym's banner).
_NOISE = ('Unable to register cuDNN factory', 'cpu_feature_guard', 'Gym has been unmaintained')


@pytest.fixture
def user_env(subprocess_env) -> dict[str, str]:
    """The environment of a user's shell: no TensorFlow log level set."""
    return {k: v for k, v in subprocess_env.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}


@pytest.mark.slow
def test_start_up_noise_is_hidden_by_default_and_shown_with_verbose(
    run_cli, user_env, cartpole_dir
):
    # `validate` imports TensorFlow (`info` on a TFDS directory does not: no noise to hide).
    code, out, err = run_cli('validate', cartpole_dir, subprocess=True, timeout=180, env=user_env)
    assert code == 0, err
    assert 'episodes: 12 ' in out
    assert err == ''
    code, out, err = run_cli(
        'validate', cartpole_dir, '--verbose', subprocess=True, timeout=180, env=user_env
    )
    assert code == 0
    assert 'episodes: 12 ' in out
    assert any(noise in err for noise in _NOISE), err
