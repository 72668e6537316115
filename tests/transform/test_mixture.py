"""Mixtures (rlds_reverb.transform.mixture) on robot data written by TFDS's own writer.

Two datasets of different lengths and specs (`tests/mixture_data.py`: kind B renames,
retypes and adds fields; both hold invalid episodes that validation skips). The oracle: the
draws (`Mixture.choices`), each followed by the next valid episode of the drawn dataset in
the order `load` reads it. Proportions: a chi-square test against the target weights over
100,000 draws (critical values at p = 0.001 from the chi-square table: scipy is not in the
stack), on the real mixed stream and against `LearnerDataset`'s table mixing.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SpecMismatchError
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables
from rlds_reverb.transform.field_mapping import FieldMapping, flatten_fields, nest_fields
from rlds_reverb.transform.mixture import (
    Mixture,
    MixtureEnd,
    MixtureLevel,
    SizeWeighting,
    make_choices,
    mix_datasets,
)
from tests import mixture_data as md
from tests import robot_data as rd

# Chi-square critical values at p = 0.001, by degrees of freedom (a printed table).
CHI2_CRITICAL_001 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467}
SPEC_A = rd.RobotSpec(rd.robot_lengths(120, seed=3, longest=300))
SPEC_B = rd.RobotSpec(rd.robot_lengths(40, seed=4, longest=60), seed=1)
STATE_PATH = f'{types.OBSERVATION}/{rd.STATE}'
MAPPING_B = FieldMapping(
    drop=(f'{types.OBSERVATION}/{md.DEPTH}',),
    rename={f'{types.OBSERVATION}/{md.PROPRIO}': STATE_PATH},
    cast={f'{types.ACTION}/{rd.GRIPPER}': 'float32'},
)
WEIGHTS = {md.KIND_A: 0.7, md.KIND_B: 0.3}


def chi_square(counts: dict[str, int], weights: dict[str, float]) -> float:
    """Returns Pearson's statistic of `counts` against the proportions of `weights`."""
    total_weight = sum(weights.values())
    n = sum(counts.values())
    expected = {k: n * w / total_weight for k, w in weights.items()}
    return sum((counts[k] - expected[k]) ** 2 / expected[k] for k in weights)


@pytest.fixture(scope='module')
def dirs(tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp('mixtures')
    return {
        md.KIND_A: md.write(root, SPEC_A, kind=md.KIND_A, invalid_every=5),
        md.KIND_B: md.write(root, SPEC_B, kind=md.KIND_B, invalid_every=3),
    }


def _load(dirs) -> dict[str, tf.data.Dataset]:
    return {kind: rlds_reverb.load(path, encoded_frames='all') for kind, path in dirs.items()}


def _mix(dirs, **kwargs) -> Mixture:
    kwargs.setdefault('weights', WEIGHTS)
    kwargs.setdefault('seed', 7)
    return mix_datasets(_load(dirs), mappings={md.KIND_B: MAPPING_B}, **kwargs)


@pytest.fixture(scope='module')
def valid_episodes(dirs) -> dict[str, list[tuple[int, int]]]:
    """`{kind: [(marker, length)]}`: each dataset's valid episodes in read order (NumPy)."""
    found = {}
    for kind, episodes in _load(dirs).items():
        found[kind] = []
        for episode in episodes.whole_episodes.as_numpy_iterator():
            steps = episode[types.STEPS]
            state = steps[types.OBSERVATION][md.PROPRIO if kind == md.KIND_B else rd.STATE]
            if np.isfinite(steps[types.REWARD]).all():
                found[kind].append((int(state[0, 0]), len(state)))
    return found


def expected_markers(mixture: Mixture, valid: dict, count: int, *, repeat: bool) -> list[int]:
    """The oracle: each draw takes the drawn dataset's next valid episode (cycling)."""
    drawn = [int(i) for i in mixture.choices.take(count).as_numpy_iterator()]
    positions = dict.fromkeys(mixture.names, 0)
    markers = []
    for index in drawn:
        name = mixture.names[index]
        if positions[name] == len(valid[name]) and not repeat:
            break
        markers.append(valid[name][positions[name] % len(valid[name])][0])
        positions[name] += 1
    return markers


def _episode_markers(dataset: tf.data.Dataset, count: int) -> list[int]:
    return [
        int(e[types.STEPS][types.OBSERVATION][rd.STATE][0, 0])
        for e in dataset.whole_episodes.take(count).as_numpy_iterator()
    ]


def test_episodes_follow_the_draws_exactly_past_invalid_ones(dirs, valid_episodes):
    mixture = _mix(dirs)
    # 300 draws cycle dataset B (27 valid of 40) several times.
    expected = expected_markers(mixture, valid_episodes, 300, repeat=True)
    assert _episode_markers(mixture.dataset, 300) == expected
    assert {m >= md.OFFSET_B for m in expected} == {True, False}


def test_the_common_spec_is_the_mapped_one_and_frames_stay_encoded(dirs):
    mixture = _mix(dirs)
    step_spec = mixture.dataset.element_spec[types.STEPS].element_spec
    assert set(mixture.dataset.element_spec) == {types.STEPS}  # Metadata left out.
    assert step_spec[types.OBSERVATION][rd.STATE] == tf.TensorSpec([4], tf.float32)
    assert step_spec[types.ACTION][rd.GRIPPER] == tf.TensorSpec([1], tf.float32)
    assert md.DEPTH not in step_spec[types.OBSERVATION]
    assert mixture.dataset.frame_formats == rlds_reverb.list_frame_fields(dirs[md.KIND_A])


def test_step_proportions_pass_chi_square_over_100000_draws(dirs):
    mixture = _mix(dirs, level=MixtureLevel.STEP, seed=11)
    states = mixture.dataset.map(lambda s: s[types.OBSERVATION][rd.STATE][0])
    markers = np.concatenate([b for b in states.take(100_000).batch(10_000).as_numpy_iterator()])
    counts = {md.KIND_A: int((markers < md.OFFSET_B).sum()), md.KIND_B: 0}
    counts[md.KIND_B] = len(markers) - counts[md.KIND_A]
    assert counts == mixture.count_choices(100_000)
    assert chi_square(counts, WEIGHTS) < CHI2_CRITICAL_001[1]


def test_choices_pass_chi_square_with_four_datasets():
    weights = {'a': 0.1, 'b': 0.2, 'c': 0.3, 'd': 0.4}
    drawn = np.concatenate(
        list(make_choices(list(weights.values()), seed=3).take(100_000).batch(50_000))
    )
    counts = dict(zip(weights, np.bincount(drawn, minlength=4).tolist(), strict=True))
    assert chi_square(counts, weights) < CHI2_CRITICAL_001[3]


def test_zero_weight_is_never_drawn(dirs):
    mixture = _mix(dirs, weights={md.KIND_A: 1.0, md.KIND_B: 0.0})
    assert mixture.count_choices(10_000) == {md.KIND_A: 10_000, md.KIND_B: 0}


@pytest.mark.parametrize('level', list(MixtureLevel))
def test_the_same_seed_gives_the_same_stream(dirs, level):
    def read(seed):
        dataset = _mix(dirs, level=level, seed=seed).dataset
        if level is MixtureLevel.EPISODE:
            dataset = dataset.whole_episodes.map(lambda e: e[types.STEPS])
        states = dataset.map(lambda s: s[types.OBSERVATION][rd.STATE])
        return [s.tolist() for s in states.take(20).as_numpy_iterator()]

    assert read(5) == read(5)
    assert read(5) != read(6)


@pytest.mark.parametrize('level', list(MixtureLevel))
def test_a_restored_iterator_continues_identically(dirs, level, tmp_path):
    def iterate():
        dataset = _mix(dirs, level=level).dataset
        if level is MixtureLevel.EPISODE:
            dataset = dataset.whole_episodes.map(lambda e: e[types.STEPS])
        return iter(dataset.map(lambda s: s[types.OBSERVATION][rd.STATE]))

    iterator = iterate()
    for _ in range(37):
        next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / 'mix'))
    after = [next(iterator).numpy().tolist() for _ in range(40)]
    fresh = iterate()  # A new pipeline, as a restarted learner builds it.
    tf.train.Checkpoint(iterator=fresh).restore(saved).assert_consumed()
    assert [next(fresh).numpy().tolist() for _ in range(40)] == after


def test_stop_ends_at_the_first_draw_of_an_exhausted_dataset(dirs, valid_episodes):
    mixture = _mix(dirs, on_end=MixtureEnd.STOP)
    expected = expected_markers(mixture, valid_episodes, 1000, repeat=False)
    assert len(expected) < 1000
    assert _episode_markers(mixture.dataset, 1000) == expected


@pytest.mark.parametrize('weighting', [SizeWeighting.EPISODES, SizeWeighting.STEPS])
def test_weights_by_size_count_valid_episodes_or_steps(dirs, valid_episodes, weighting):
    mixture = _mix(dirs, weight_by_size=weighting)
    column = 0 if weighting is SizeWeighting.EPISODES else 1
    sizes = {
        kind: len(found) if column == 0 else sum(n for _, n in found)
        for kind, found in valid_episodes.items()
    }
    assert mixture.sizes == sizes
    raw = {kind: WEIGHTS[kind] * sizes[kind] for kind in sizes}
    expected = {kind: w / sum(raw.values()) for kind, w in raw.items()}
    assert mixture.proportions == pytest.approx(expected)


def test_raise_mode_fails_the_iterator_naming_the_episode(dirs):
    mixture = _mix(dirs, on_invalid='raise')
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'episode \d+.*reward.*finite'):
        for _ in mixture.dataset.whole_episodes.take(200):
            pass


def test_different_specs_are_refused_naming_the_fields(dirs):
    with pytest.raises(SpecMismatchError, match='declare a FieldMapping') as raised:
        mix_datasets(_load(dirs), weights=WEIGHTS, seed=0)
    text = str(raised.value)
    assert 'observation.proprio: unexpected field float32[4]' in text
    assert 'observation.state: expected float32[4], missing' in text
    assert 'action.gripper: expected float32[1], found float64[1]' in text
    assert 'observation.depth' in text


def test_different_frame_formats_are_refused(dirs):
    datasets = _load(dirs)
    datasets[md.KIND_B] = rlds_reverb.load(dirs[md.KIND_B])  # Frames decoded: uint8.
    with pytest.raises(SpecMismatchError, match=r'observation\.image: expected string'):
        mix_datasets(datasets, weights=WEIGHTS, seed=0, mappings={md.KIND_B: MAPPING_B})


@pytest.mark.parametrize(
    ('mapping', 'match'),
    [
        (FieldMapping(drop=('observation/nope',)), "dropped field 'observation/nope'.*proprio"),
        (FieldMapping(rename={'nope': 'x'}), "renamed field 'nope'"),
        (FieldMapping(cast={'observation/nope': 'int32'}), "the cast field 'observation/nope'"),
        (FieldMapping(rename={'observation/proprio': 'reward'}), "renames a field to 'reward'"),
        (
            FieldMapping(cast={'observation/instruction': 'float32'}),
            "'observation/instruction' \\(string\\) cannot be cast",
        ),
    ],
)
def test_bad_mappings_are_refused_naming_the_field(dirs, mapping, match):
    with pytest.raises(SpecMismatchError, match=match):
        mix_datasets(_load(dirs), weights=WEIGHTS, seed=0, mappings={md.KIND_B: mapping})


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        ({'weights': {md.KIND_A: 1.0}}, 'weights must name exactly the datasets'),
        ({'weights': {md.KIND_A: -1.0, md.KIND_B: 1.0}}, "dataset 'a' must be finite and >= 0"),
        ({'weights': {md.KIND_A: 'x', md.KIND_B: 1.0}}, "dataset 'a' must be a number"),
        ({'weights': {md.KIND_A: 0, md.KIND_B: 0}}, 'must sum to a positive number'),
        ({'seed': 1.5}, 'seed=1.5 must be an integer'),
        ({'level': 'batch'}, "level='batch' is not valid"),
        ({'on_end': 'wrap'}, "on_end='wrap' is not valid"),
        ({'weight_by_size': 'bytes'}, "weight_by_size='bytes' is not valid"),
        ({'on_invalid': 'report'}, "on_invalid='report' does not mix"),
        ({'mappings': {'c': FieldMapping()}}, r"mappings name datasets \['c'\]"),
    ],
)
def test_bad_arguments_are_refused(dirs, kwargs, match):
    kwargs = {'weights': WEIGHTS, 'seed': 0, 'mappings': {md.KIND_B: MAPPING_B}, **kwargs}
    with pytest.raises(ValueError, match=match):
        mix_datasets(_load(dirs), **kwargs)


def test_no_datasets_is_refused():
    with pytest.raises(ValueError, match='at least one dataset'):
        mix_datasets({}, weights={}, seed=0)


def test_count_choices_and_table_ratios_refuse_bad_arguments(dirs):
    mixture = _mix(dirs)
    with pytest.raises(ValueError, match='num_elements=-1 must be an integer >= 0'):
        mixture.count_choices(-1)
    with pytest.raises(ValueError, match='its own table'):
        mixture.table_ratios({md.KIND_A: 't', md.KIND_B: 't'})
    assert mixture.count_choices(0) == {md.KIND_A: 0, md.KIND_B: 0}


def test_flatten_and_nest_fields_are_inverses():
    nest = {'observation': {'state': 1, 'image': {'left': 2}}, 'reward': 3}
    assert flatten_fields(nest) == {
        'observation/state': 1,
        'observation/image/left': 2,
        'reward': 3,
    }
    assert nest_fields(flatten_fields(nest)) == nest


_MARK_SPEC = {'source': tf.TensorSpec([], tf.int64)}


@pytest.fixture
def mix_server():
    server = reverb.Server(
        [tables.uniform(f'table_{k}', max_size=100, signature=_MARK_SPEC) for k in WEIGHTS]
    )
    yield server
    server.stop()


def _insert_markers(client: reverb.Client, table: str, source: int) -> None:
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for _ in range(20):
            writer.append({'source': np.int64(source)})
            writer.create_item(table, 1.0, {'source': writer.history['source'][-1]})
        writer.flush()


def test_learner_dataset_mixes_tables_in_the_same_proportions(dirs, mix_server):
    """One table per dataset, `tables=mixture.table_ratios(...)`: both pass chi-square
    against the weights, and against each other (a 2 x 2 contingency table)."""
    mixture = _mix(dirs)
    client = reverb.Client(f'localhost:{mix_server.port}')
    for index, kind in enumerate(mixture.names):
        _insert_markers(client, f'table_{kind}', index)
    ratios = mixture.table_ratios({kind: f'table_{kind}' for kind in mixture.names})
    learner = sampling.LearnerDataset(
        client.server_address, ratios, data_spec=_MARK_SPEC, sequence_length=None, batch_size=50
    )
    drawn = np.concatenate(
        [b.experience['source'].numpy() for b in learner.as_dataset().take(2_000)]
    )
    learned = dict(zip(mixture.names, np.bincount(drawn, minlength=2).tolist(), strict=True))
    mixed = mixture.count_choices(len(drawn))
    assert chi_square(learned, WEIGHTS) < CHI2_CRITICAL_001[1]
    assert chi_square(mixed, WEIGHTS) < CHI2_CRITICAL_001[1]
    pooled = {k: (learned[k] + mixed[k]) / (2 * len(drawn)) for k in WEIGHTS}
    assert chi_square(learned, pooled) + chi_square(mixed, pooled) < CHI2_CRITICAL_001[1]


def test_a_source_load_cannot_read_is_refused(dirs, tmp_path):
    with pytest.raises(SourceError, match='nothing'):
        mix_datasets(
            {md.KIND_A: dirs[md.KIND_A], 'gone': tmp_path / 'nothing'},
            weights={md.KIND_A: 1, 'gone': 1},
            seed=0,
        )
