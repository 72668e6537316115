"""Small RLDS datasets in the exact layouts of TFDS catalogue datasets, written to disk.

Feature structures: D4RL MuJoCo, RL Unplugged and robosuite take `info.features` from the
builders installed with tensorflow-datasets (building `info` needs no download). The Open
X-Embodiment (rtx) builders read their features from a GCS bucket, so `fractal20220817_data`
and `austin_buds_dataset_converted_externally_to_rlds` are transcribed from the TFDS
catalogue pages (docs/catalog/*.md) of the same TFDS release.

Content is small and random, with valid flags, and follows each builder's conventions at
episode ends (read in the installed builders' code):
- D4RL (`d4rl/dataset_utils.py`): an episode ending in a terminal state gets one extra step
  (zero action, reward and infos; discount 0; `is_terminal` and `is_last`), and the last
  real step's discount becomes 0; a time-limit episode ends with `is_last` only.
- RL Unplugged control suite (`rlu_control_suite.py`): the last step's reward is 0;
  in a terminal episode the last two steps have discount 0 and the last is terminal.
- Open X-Embodiment converted sets: discount 1 everywhere, reward 1 on the last step,
  which has `is_last` and `is_terminal`; fractal has no discount field at all.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

_F32 = np.float32
# Episode lengths (real steps) and endings of every catalogue test dataset: a single-step
# episode, a terminated one and a truncated one.
EPISODES = ((1, True), (4, True), (3, False))


def _vec(n: int, dtype=_F32) -> tfds.features.Tensor:
    return tfds.features.Tensor(shape=(n,), dtype=dtype)


def builder_features(name: str, data_dir: pathlib.Path) -> tfds.features.FeaturesDict:
    """Returns `info.features` of an installed catalogue builder (no download)."""
    return tfds.builder(name, data_dir=str(data_dir)).info.features


def fractal_features() -> tfds.features.FeaturesDict:
    """`fractal20220817_data` 0.1.0 (RT-1), from docs/catalog/fractal20220817_data.md."""
    aspects = ('already_success', 'feasible', 'has_aspects', 'success', 'undesirable')
    attributes = ('collection_mode', 'data_type', 'env', 'location', 'objects_family')
    attributes += ('task_family',)
    return tfds.features.FeaturesDict(
        {
            'aspects': {name: np.bool_ for name in aspects},
            'attributes': {
                **{name: np.int64 for name in attributes},
                **{f'{name}_name': np.str_ for name in attributes},
            },
            'steps': tfds.features.Dataset(
                {
                    'action': {
                        'base_displacement_vector': _vec(2),
                        'base_displacement_vertical_rotation': _vec(1),
                        'gripper_closedness_action': _vec(1),
                        'rotation_delta': _vec(3),
                        'terminate_episode': _vec(3, np.int32),
                        'world_vector': _vec(3),
                    },
                    'is_first': np.bool_,
                    'is_last': np.bool_,
                    'is_terminal': np.bool_,
                    'observation': {
                        'base_pose_tool_reached': _vec(7),
                        'gripper_closed': _vec(1),
                        'gripper_closedness_commanded': _vec(1),
                        'height_to_bottom': _vec(1),
                        'image': tfds.features.Image(shape=(256, 320, 3), dtype=np.uint8),
                        'natural_language_embedding': _vec(512),
                        'natural_language_instruction': np.str_,
                        'orientation_box': tfds.features.Tensor(shape=(2, 3), dtype=_F32),
                        'orientation_start': _vec(4),
                        'robot_orientation_positions_box': tfds.features.Tensor(
                            shape=(3, 3), dtype=_F32
                        ),
                        'rotation_delta_to_go': _vec(3),
                        'src_rotation': _vec(4),
                        'vector_to_go': _vec(3),
                        'workspace_bounds': tfds.features.Tensor(shape=(3, 3), dtype=_F32),
                    },
                    'reward': tfds.features.Scalar(dtype=_F32),
                }
            ),
        }
    )


def austin_buds_features() -> tfds.features.FeaturesDict:
    """`austin_buds_dataset_converted_externally_to_rlds` 0.1.0, from its catalogue page."""

    def image():
        return tfds.features.Image(shape=(128, 128, 3), dtype=np.uint8, encoding_format='png')

    return tfds.features.FeaturesDict(
        {
            'episode_metadata': {'file_path': tfds.features.Text()},
            'steps': tfds.features.Dataset(
                {
                    'action': _vec(7),
                    'discount': tfds.features.Scalar(dtype=_F32),
                    'is_first': np.bool_,
                    'is_last': np.bool_,
                    'is_terminal': np.bool_,
                    'language_embedding': _vec(512),
                    'language_instruction': tfds.features.Text(),
                    'observation': {'image': image(), 'state': _vec(24), 'wrist_image': image()},
                    'reward': tfds.features.Scalar(dtype=_F32),
                }
            ),
        }
    )


def _random_value(feature, rng: np.random.Generator, index: int):
    """Returns a random value of `feature` (strings name the value's index)."""
    if isinstance(feature, tfds.features.FeaturesDict):
        return {k: _random_value(v, rng, index) for k, v in feature.items()}
    if isinstance(feature, tfds.features.Image):
        shape = tuple(d if d is not None else 8 for d in feature.shape)
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if isinstance(feature, tfds.features.Text) or feature.np_dtype == np.object_:
        return f'text {index}'
    shape = tuple(d if d is not None else 2 for d in feature.shape)
    dtype = np.dtype(feature.np_dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 5, size=shape).astype(dtype)
    return rng.uniform(0.0, 1.0, size=shape).astype(dtype)


def _zeros_like(value):
    if isinstance(value, dict):
        return {k: _zeros_like(v) for k, v in value.items()}
    return np.zeros_like(value)


def _d4rl_steps(steps: list[dict], terminal: bool) -> list[dict]:
    for step in steps:
        step['discount'] = _F32(1.0)
    if terminal:
        last = steps[-1]
        last.update(discount=_F32(0.0), is_last=False)
        extra = {k: _zeros_like(v) for k, v in last.items()}
        steps.append({**extra, 'observation': last['observation'], 'is_first': False})
    return steps


def _rlu_steps(steps: list[dict], terminal: bool) -> list[dict]:
    for step in steps:
        step['discount'] = _F32(1.0)
    steps[-1]['reward'] = _F32(0.0)
    if terminal:
        for step in steps[-2:]:
            step['discount'] = _F32(0.0)
    return steps


def _oxe_steps(steps: list[dict], terminal: bool) -> list[dict]:
    for step in steps:
        step['reward'] = _F32(0.0)
        if 'discount' in step:
            step['discount'] = _F32(1.0)
    steps[-1]['reward'] = _F32(1.0)
    return steps


# name -> (version, features(data_dir), convention)
LAYOUTS = {
    'd4rl_mujoco_halfcheetah': (
        '1.2.0',
        lambda d: builder_features('d4rl_mujoco_halfcheetah/v2-expert', d),
        _d4rl_steps,
    ),
    'rlu_control_suite': (
        '1.0.0',
        lambda d: builder_features('rlu_control_suite/cartpole_swingup', d),
        _rlu_steps,
    ),
    'fractal20220817_data': ('0.1.0', lambda d: fractal_features(), _oxe_steps),
    'austin_buds_dataset_converted_externally_to_rlds': (
        '0.1.0',
        lambda d: austin_buds_features(),
        _oxe_steps,
    ),
}


def make_episodes(features: tfds.features.FeaturesDict, convention, *, seed: int = 0):
    """Returns the `EPISODES` as TFDS examples of `features`, following `convention`."""
    rng = np.random.default_rng(seed)
    step_feature = features['steps'].feature
    examples = []
    for index, (length, terminal) in enumerate(EPISODES):
        steps = []
        for t in range(length):
            step = _random_value(step_feature, rng, t)
            step.update(is_first=t == 0, is_last=t == length - 1, is_terminal=False)
            steps.append(step)
        steps = convention(steps, terminal)
        steps[-1].update(is_last=True, is_terminal=terminal)
        episode = {k: _random_value(v, rng, index) for k, v in features.items() if k != 'steps'}
        examples.append((str(index), {**episode, 'steps': steps}))
    return examples


def write_layout(name: str, data_dir: pathlib.Path) -> pathlib.Path:
    """Writes the catalogue test dataset `name` into `data_dir/name/version`."""
    version, make_features, convention = LAYOUTS[name]
    features = make_features(data_dir / '.builders')
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version=version,
        features=features,
        split_datasets={'train': make_episodes(features, convention)},
        data_dir=str(data_dir),
        disable_shuffling=True,
    )
    return data_dir / name / version


def step_counts(name: str) -> list[int]:
    """Returns the number of steps of each episode of the test dataset `name`."""
    extra = 1 if name == 'd4rl_mujoco_halfcheetah' else 0
    return [length + (extra if terminal else 0) for length, terminal in EPISODES]
