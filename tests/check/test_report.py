"""The dataset report's figures (rlds_reverb.check.report) and its page (report_html).

The figures are checked against the toolkit's other answers (`info`'s `DatasetStats`,
`validate`'s report) and against NumPy over the episodes the data was written from; the
browser test (test_report_browser.py) opens the page in Chromium.
"""

from __future__ import annotations

import os
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb.check import report, report_html, stats, summary
from rlds_reverb.core import errors, types
from tests import builders, users_data

# 12 episodes with images, strings and metadata, in 2 shuffled shards (about 1 s to write).
_USERS_SPEC = users_data.users_spec(12, num_shards=2, max_drawn=40)


@pytest.fixture(scope='module')
def users_small(tmp_path_factory) -> pathlib.Path:
    return users_data.write(tmp_path_factory.mktemp('users_small'), _USERS_SPEC)


def _rlds_with_metadata(episodes: list[dict], metadata: list[dict]) -> tf.data.Dataset:
    """An RLDS dataset of step dicts, each episode with its episode-level fields."""
    dataset = None
    for steps, fields in zip(episodes, metadata, strict=True):
        element = tf.data.Dataset.from_tensors(
            {types.STEPS: tf.data.Dataset.from_tensor_slices(steps), **fields}
        )
        dataset = element if dataset is None else dataset.concatenate(element)
    return dataset


# --- Key figures and validation: the toolkit's own answers ----------------------------------


def test_key_figures_equal_info(cartpole_dir):
    found = report.compute_report(rlds_reverb.load(cartpole_dir))
    expected = summary.describe_dataset_files(cartpole_dir, split='train')
    assert found.stats.format() == expected.format()
    np.testing.assert_array_equal(found.stats.lengths, expected.lengths)
    np.testing.assert_array_equal(found.stats.returns, expected.returns)
    walked = stats.describe_dataset(rlds_reverb.load(cartpole_dir))
    assert found.stats.format() == walked.format()
    assert (
        found.validation.format() == rlds_reverb.validate(rlds_reverb.load(cartpole_dir)).format()
    )


def test_validation_equals_validate_on_invalid_and_unreadable_episodes(tmp_path):
    uneven = builders.episode(3)
    uneven[types.OBSERVATION] = uneven[types.OBSERVATION][:2]  # Does not decode.
    nan_reward = builders.episode(4, reward=[0.0, np.nan, 1.0, 0.0])
    twice_first = builders.episode(3)
    twice_first[types.IS_FIRST] = np.array([True, False, True])
    episodes = [builders.episode(2), nan_reward, uneven, builders.episode(5), twice_first]
    directory = builders.write_tfds(tmp_path, episodes, name='broken', episodes_per_shard=2)
    found = report.compute_report(rlds_reverb.load(directory))
    expected = rlds_reverb.validate(rlds_reverb.load(directory), on_invalid='report')
    assert found.validation == expected
    assert found.validation.invalid_episodes == [1, 2, 4]
    assert found.unreadable == [2]
    # The unreadable episode is left out of the figures, the invalid ones are counted.
    assert found.stats.episodes == 4
    np.testing.assert_array_equal(found.stats.lengths, [2, 4, 5, 3])
    page = report_html.render_html(found)
    assert 'finite' in page and 'readable' in page and '3 invalid episodes' in page


# --- Step fields, metadata, actions, frames and strings against NumPy -----------------------


def _numpy_leaves(nests: list[dict]) -> dict[str, np.ndarray]:
    """Every leaf of the nests (one per episode), concatenated over episodes (`.` paths)."""
    leaves: dict[str, list] = {}
    for nest in nests:
        for path, leaf in tree.flatten_with_path(nest):
            name = '.'.join(map(str, path))
            leaves.setdefault(name, []).append(np.asarray(leaf).reshape(-1))
    return {name: np.concatenate(values) for name, values in leaves.items()}


def test_fields_metadata_frames_and_strings_equal_numpy(users_small):
    found = report.compute_report(rlds_reverb.load(users_small), frame_episodes=3)
    read = users_data.read_numpy(rlds_reverb.load(users_small))  # In the report's order.
    by_name = {f.name: f for f in found.step_fields}
    for name, values in _numpy_leaves([e[types.STEPS] for e in read]).items():
        field = by_name[name]
        if values.dtype == object:
            assert field.is_string
            distinct = sorted({v.decode() for v in values})
            assert field.distinct == len(distinct)
            assert sorted(field.samples) == distinct  # 7 values, fewer than the 8 kept.
            continue
        values = values.astype(np.float64)
        assert field.count == values.size and field.nan_count == 0
        assert (field.minimum, field.maximum) == (values.min(), values.max())
        assert field.mean == pytest.approx(values.mean(), rel=1e-12)
    assert by_name['observation.image'].shape == users_data.IMAGE_SHAPE
    metadata = {f.name: f for f in found.metadata_fields}
    leaves = _numpy_leaves([{users_data.METADATA: e[users_data.METADATA]} for e in read])
    assert (
        metadata['episode_metadata.episode_id'].maximum
        == leaves['episode_metadata.episode_id'].max()
    )
    assert metadata['episode_metadata.score'].mean == pytest.approx(
        leaves['episode_metadata.score'].astype(np.float64).mean()
    )
    assert sorted(metadata['episode_metadata.agent'].samples) == ['agent-0', 'agent-1', 'agent-2']
    # Frames: the first and last steps of the first three episodes read.
    assert [(f.field, f.episode) for f in found.frames] == [
        ('observation.image', i) for i in range(3)
    ]
    for sample, episode in zip(found.frames, read, strict=False):
        images = episode[types.STEPS][types.OBSERVATION][users_data.IMAGE]
        np.testing.assert_array_equal(sample.first, images[0])
        np.testing.assert_array_equal(sample.last, images[-1])
    # Continuous actions: a histogram per dimension holding every value.
    (action,) = found.actions
    assert not action.discrete and action.dims == ['action[0]', 'action[1]']
    actions = np.concatenate([e[types.STEPS][types.ACTION] for e in read])
    for dim, (edges, counts) in enumerate(action.histograms):
        expected, _ = np.histogram(actions[:, dim].astype(np.float64), edges)
        np.testing.assert_array_equal(counts, expected)
        assert counts.sum() == len(actions)


def test_nan_values_are_counted_and_left_out_of_min_max_and_mean():
    first = builders.episode(3, observation=[[1.0, np.nan], [np.nan, np.nan], [-2.0, 4.0]])
    second = builders.episode(2, observation=[[np.nan, np.nan], [np.nan, np.nan]])
    found = report.compute_report(builders.rlds([first, second]))
    (observation,) = (f for f in found.step_fields if f.name == types.OBSERVATION)
    assert (observation.count, observation.nan_count) == (10, 7)
    assert (observation.minimum, observation.maximum, observation.mean) == (-2.0, 4.0, 1.0)
    assert 'NaN' in report_html.render_html(found)


def test_integer_actions_are_counted_by_value():
    episodes = [builders.episode(4, action=[0, 2, 2, 5]), builders.episode(3, action=[2, 0, 7])]
    found = report.compute_report(builders.rlds(episodes))
    (action,) = found.actions
    assert action.discrete
    assert action.categories == [{0: 2, 2: 3, 5: 1, 7: 1}]


def test_integer_actions_with_many_values_become_a_histogram():
    count = report.MAX_CATEGORIES + 10
    episodes = [builders.episode(count, action=np.arange(count) * 3)]
    (action,) = report.compute_report(builders.rlds(episodes)).actions
    assert not action.discrete
    edges, counts = action.histograms[0]
    assert counts.sum() == count and edges[0] <= 0 and edges[-1] > 3 * (count - 1)


def test_empty_episodes_and_grayscale_frames_render():
    frames = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5, 1)
    episodes = [
        builders.episode(3, observation=frames),
        builders.episode(0, observation=np.zeros((0, 4, 5, 1), np.uint8)),
    ]
    found = report.compute_report(builders.rlds(episodes))
    assert found.validation.invalid_episodes == [1]  # No steps.
    assert [s.episode for s in found.frames] == [0]
    np.testing.assert_array_equal(found.frames[0].last, frames[-1])
    # The empty episode's uint8 limits do not leak into the minimum and maximum.
    (observation,) = (f for f in found.step_fields if f.name == types.OBSERVATION)
    assert (observation.minimum, observation.maximum, observation.mean) == (0, 59, 29.5)
    page = report_html.render_html(found)
    assert page.count('<img src="data:image/png;base64,') == 2 + 2 + 1  # Frames, plots, actions.


def test_text_from_the_data_is_escaped():
    evil = '<script>alert("x")</script>'
    steps = builders.episode(2)
    steps['note'] = np.array([evil.encode(), b'fine & dandy'], object)
    metadata = {'episode_metadata': {'agent': tf.constant(f'<b>{evil}</b>'.encode())}}
    found = report.compute_report(_rlds_with_metadata([steps], [metadata]), title=f'<i>{evil}')
    page = report_html.render_html(found)
    assert '<script' not in page and '<b>' not in page and '<i>' not in page
    assert '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;' in page
    assert 'fine &amp; dandy' in page


def test_key_figures_carry_data_attributes(cartpole_dir):
    found = report.compute_report(rlds_reverb.load(cartpole_dir))
    page = report_html.render_html(found)
    shown = dict(re.findall(r'data-figure="([\w-]+)" data-value="[^"]*">([^<]*)<', page))
    assert shown['episodes'] == str(found.stats.episodes)
    assert shown['steps'] == str(found.stats.steps)
    assert shown['mean-return'] == f'{found.stats.returns.mean():.3f}'


def test_progress_is_called_once_per_episode(cartpole_dir):
    calls = []
    found = report.compute_report(
        rlds_reverb.load(cartpole_dir), progress=lambda e, s: calls.append((e, s))
    )
    assert [e for e, _ in calls] == [1] * found.stats.episodes
    assert sum(s for _, s in calls) == found.stats.steps


# --- Errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('option', 'value'), [('frame_episodes', -1), ('string_samples', 1.5), ('frame_episodes', True)]
)
def test_bad_options_are_refused(cartpole_episodes, option, value):
    with pytest.raises(ValueError, match=rf'{option}=.* is not valid'):
        report.compute_report(cartpole_episodes, **{option: value})


def test_a_dataset_without_steps_is_refused(tmp_path):
    with pytest.raises(errors.SourceError, match='steps'):
        rlds_reverb.write_report(tf.data.Dataset.range(3), tmp_path / 'r.html')
    assert list(tmp_path.iterdir()) == []


def test_flags_that_are_not_bool_are_refused(tmp_path):
    steps = builders.episode(2)
    steps[types.IS_FIRST] = steps[types.IS_FIRST].astype(np.int32)
    with pytest.raises(errors.SpecMismatchError, match="'is_first' has dtype int32"):
        rlds_reverb.write_report(builders.rlds([steps]), tmp_path / 'r.html')


def test_write_report_replaces_the_file_whole_and_leaves_no_temporary_file(
    cartpole_episodes, tmp_path
):
    out = tmp_path / 'report.html'
    out.write_text('old')
    found = rlds_reverb.write_report(cartpole_episodes.take(3), out, title='three')
    assert found.stats.episodes == 3
    assert (
        out.read_text().startswith('<!DOCTYPE html>') and '<title>three</title>' in out.read_text()
    )
    assert [p.name for p in tmp_path.iterdir()] == ['report.html']
    with pytest.raises(ValueError):
        rlds_reverb.write_report(cartpole_episodes, out, frame_episodes=-1)
    assert '<title>three</title>' in out.read_text()  # Untouched by the failed write.
    assert [p.name for p in tmp_path.iterdir()] == ['report.html']


def test_unwritable_paths_are_named_before_reading(tmp_path):
    with pytest.raises(IsADirectoryError, match='it is a directory. Give a file path'):
        report_html.check_output_path(tmp_path)
    with pytest.raises(FileNotFoundError, match='its directory does not exist'):
        report_html.check_output_path(tmp_path / 'missing' / 'r.html')
    (tmp_path / 'file').write_text('')
    with pytest.raises(
        NotADirectoryError,
        match="Cannot write the report to '.*file/r.html': '.*file' is not a directory",
    ):
        report_html.check_output_path(tmp_path / 'file' / 'r.html')
    with pytest.raises(IsADirectoryError, match='it is a directory'):
        report_html.save_report(
            report.compute_report(builders.rlds([builders.episode(2)])), tmp_path
        )
    # write_report checks first: a dataset that is not RLDS is not even looked at.
    with pytest.raises(IsADirectoryError):
        rlds_reverb.write_report(tf.data.Dataset.range(3), tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes into read-only directories')
def test_a_read_only_directory_is_named(tmp_path):
    folder = tmp_path / 'ro'
    folder.mkdir(mode=0o500)
    with pytest.raises(PermissionError, match='Permission denied. Give a path in an existing'):
        report_html.check_output_path(folder / 'r.html')


def test_open_shapes_are_shown_and_their_actions_left_out():
    signature = builders.step_signature(
        **{
            types.OBSERVATION: tf.TensorSpec([None], tf.float32),
            types.ACTION: tf.TensorSpec(None, tf.int64),
        }
    )
    episodes = [builders.episode(2, obs_dim=3), builders.episode(3, obs_dim=3)]
    found = report.compute_report(builders.rlds_from_generator(episodes, signature))
    shapes = {f.name: f.shape for f in found.step_fields}
    assert (shapes[types.OBSERVATION], shapes[types.ACTION]) == ((None,), None)
    assert found.actions == []
    page = report_html.render_html(found)
    assert '<td>[?]</td>' in page and '<td>any</td>' in page
