"""`adders.chunks` against the hand-computed cases, the NumPy reference, Octo and LeRobot.

The cases (`tests/cases/chunk_cases.py`) run through the adder in both dataset forms and
through the reference; hypothesis draws streams of episodes (lengths 1 to 6, histories and
horizons up to 9, both endings, float, dict, uint8 image and string observations) and
checks the adder against the reference, and the references of Octo and LeRobot against
ours by the mapping of docs/semantics.md §12.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import adders
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.read.loading import load
from tests import builders, chunk_references, expected
from tests.cases import chunk_cases

_MASKS = (
    types.HISTORY_IS_PAD,
    types.CHUNK_IS_PAD,
    types.CHUNK_IS_TRUNCATED,
    types.CHUNK_IS_TERMINATED,
)
_KNOBS = [('rlds', 1), ('tensors', 3)]


def assert_same(actual, want, *, where: str = '') -> None:
    """Asserts equal nests: same structure, shapes, dtypes and values (strings too)."""
    tf.nest.assert_same_structure(actual, want)
    for a, w in zip(tf.nest.flatten(actual), tf.nest.flatten(want), strict=True):
        a, w = np.asarray(a), np.asarray(w)
        if a.dtype.kind in 'OS' and w.dtype.kind in 'OS':  # TF gives bytes as objects.
            a, w = a.astype(object), w.astype(object)
        assert a.shape == w.shape, f'{where}: shape {a.shape} != {w.shape}'
        assert a.dtype == w.dtype, f'{where}: dtype {a.dtype} != {w.dtype}'
        np.testing.assert_array_equal(a, w, err_msg=where)


def _case_params():
    params = []
    for i, case in enumerate(chunk_cases.CASES):
        form, per_call = _KNOBS[i % len(_KNOBS)]
        params.append(pytest.param(case, form, per_call, id=f'{case["testcase_name"]}-{form}'))
    return params


@pytest.mark.parametrize('case,form,per_call', _case_params())
def test_chunks_match_case(case, form, per_call):
    inputs = builders.case_episodes(case['episodes'])
    transform = adders.chunks(**case['params'], episodes_per_call=per_call)
    out = builders.run_transform(transform, inputs, form)
    assert len(out) == len(case['expected'])
    for steps, want in zip(out, case['expected'], strict=True):
        expected.assert_nest_close({k: steps[k] for k in want}, want, where=case['testcase_name'])
        for mask in _MASKS:
            assert steps[mask].dtype == bool


@pytest.mark.parametrize('case', chunk_cases.CASES, ids=lambda c: c['testcase_name'])
def test_chunk_cases_equal_the_reference(case):
    for steps, want in zip(builders.case_episodes(case['episodes']), case['expected'], strict=True):
        got = chunk_references.reference_chunks(steps, **case['params'])
        expected.assert_nest_close({k: got[k] for k in want}, want, where=case['testcase_name'])


# --- Random streams ----------------------------------------------------------------------

OBSERVATION_KINDS = ('float', 'dict', 'image', 'string')


def random_observations(rng, size: int, kind: str):
    """Observations of one kind: float `[3]`, a dict, uint8 images, or encoded-frame bytes."""
    if kind == 'float':
        return rng.normal(size=(size, 3)).astype(np.float32)
    if kind == 'image':
        return rng.integers(0, 256, size=(size, 4, 4, 3), dtype=np.uint8)
    if kind == 'string':  # Encoded frames stay tf.string leaves (bytes of any length).
        frames = np.array(
            [b'frame%d' % rng.integers(10 ** rng.integers(1, 4)) for _ in range(size)]
        )
        return {'frame': frames, 'pos': rng.normal(size=(size, 2)).astype(np.float32)}
    return {
        'pos': rng.normal(size=(size, 2)).astype(np.float32),
        'pixels': rng.integers(0, 256, size=(size, 2, 2), dtype=np.uint8),
    }


def random_stream(seed: int, lengths, endings, kind: str) -> list[dict]:
    """Episodes of the given lengths and endings, with random observations and actions."""
    rng = np.random.default_rng(seed)
    return [
        builders.episode(
            size,
            observation=random_observations(rng, size, kind),
            action=rng.normal(size=(size, 2)).astype(np.float32),
            reward=rng.normal(size=size).astype(np.float32),
            discount=rng.random(size).astype(np.float32),
            ending=ending,
        )
        for size, ending in zip(lengths, endings, strict=True)
    ]


@st.composite
def streams(draw, max_length: int = 6):
    count = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, max_length), min_size=count, max_size=count))
    endings = draw(
        st.lists(st.sampled_from(['terminated', 'truncated']), min_size=count, max_size=count)
    )
    kind = draw(st.sampled_from(OBSERVATION_KINDS))
    return random_stream(draw(st.integers(0, 2**16)), lengths, endings, kind)


# Every example traces a tf.data pipeline: few examples, and no shrinking (minutes with TF).
_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


@_SETTINGS
@given(
    episodes=streams(),
    history=st.integers(1, 9),
    horizon=st.integers(1, 9),
    final_action=st.sampled_from(['ignored', 'recorded']),
    fill=st.sampled_from(['edge', 'zero']),
    form=st.sampled_from(builders.FORMS),
    per_call=st.sampled_from([1, 3]),
)
def test_chunks_equal_the_reference(episodes, history, horizon, final_action, fill, form, per_call):
    options = dict(history=history, horizon=horizon, final_action=final_action, fill=fill)
    out = builders.run_transform(
        adders.chunks(**options, episodes_per_call=per_call), episodes, form
    )
    for index, (steps, given_steps) in enumerate(zip(out, episodes, strict=True)):
        want = chunk_references.reference_chunks(given_steps, **options)
        assert_same(steps, want, where=f'episode {index}, {options}')


def _lengths(episodes) -> list[int]:
    return [len(steps[types.IS_FIRST]) for steps in episodes]


def _concatenate(nests):
    return tf.nest.map_structure(lambda *xs: np.concatenate(xs), *nests)


@_SETTINGS
@given(episodes=streams(), history=st.integers(1, 9), horizon=st.integers(1, 9))
def test_chunks_map_to_lerobot(episodes, history, horizon):
    fps = 10
    options = dict(history=history, horizon=horizon)
    recorded = builders.run_transform(
        adders.chunks(**options, final_action='recorded'), episodes, 'tensors'
    )
    stream, ours = _concatenate(episodes), _concatenate(recorded)
    deltas = chunk_references.lerobot_delta_indices(
        chunk_references.lerobot_delta_timestamps(history, horizon, fps), fps
    )
    observation = stream[types.OBSERVATION]
    leaves = observation if isinstance(observation, dict) else {None: observation}
    for key, leaf in leaves.items():  # LeRobot's keys are flat: one query per leaf.
        frames = {types.OBSERVATION: leaf, types.ACTION: stream[types.ACTION]}
        theirs = chunk_references.lerobot_as_ours(
            chunk_references.lerobot_frames(frames, _lengths(episodes), deltas)
        )
        mine = {k: ours[k] for k in theirs}
        if key is not None:
            mine[types.OBSERVATION] = mine[types.OBSERVATION][key]
        assert_same(mine, theirs, where=f'leaf {key!r}')
    # 'ignored' pads the action of the last step (LeRobot's frame L) too.
    ignored = builders.run_transform(adders.chunks(**options), episodes, 'tensors')
    for steps, by_recorded in zip(ignored, recorded, strict=True):
        size = len(steps[types.IS_FIRST])
        at_last = np.arange(size)[:, None] + np.arange(horizon)[None, :] == size - 1
        np.testing.assert_array_equal(
            steps[types.CHUNK_IS_PAD], by_recorded[types.CHUNK_IS_PAD] | at_last
        )


@_SETTINGS
@given(episodes=streams(), history=st.integers(1, 9), horizon=st.integers(1, 9))
def test_chunks_map_to_octo(episodes, history, horizon):
    options = dict(history=history, horizon=horizon, final_action='recorded')
    out = builders.run_transform(adders.chunks(**options), episodes, 'tensors')
    for steps, given_steps in zip(out, episodes, strict=True):
        observation = given_steps[types.OBSERVATION]
        leaves = observation if isinstance(observation, dict) else {'': observation}
        octo = chunk_references.octo_chunk_act_obs(
            leaves, given_steps[types.ACTION], history, horizon
        )
        theirs = chunk_references.octo_as_ours(octo, history, horizon)
        if not isinstance(observation, dict):
            theirs[types.OBSERVATION] = theirs[types.OBSERVATION]['']
        assert_same({k: steps[k] for k in theirs}, theirs)
        # Octo's one flag is our padding: it conflates the time limit and the termination.
        np.testing.assert_array_equal(
            steps[types.CHUNK_IS_PAD],
            steps[types.CHUNK_IS_TRUNCATED] | steps[types.CHUNK_IS_TERMINATED],
        )


def test_octo_marks_padding_from_one_position_later():
    # Octo's formula, as published: the first position past the end (a copy of a_L) is
    # not marked; ours marks it (docs/semantics.md §12).
    octo = chunk_references.octo_chunk_act_obs({'x': np.arange(3.0)}, np.ones([3, 1]), 1, 4)
    np.testing.assert_array_equal(
        octo['observation']['task_completed'][:, 0],
        [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1]],
    )
    ours = builders.run_transform(
        adders.chunks(1, 4, final_action='recorded'), [builders.episode(3)], 'tensors'
    )[0]
    np.testing.assert_array_equal(
        ours[types.CHUNK_IS_PAD], [[0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1]]
    )


def test_n_step_fields_before_chunks_are_the_chunks_rl_target():
    episodes = [builders.episode(5, ending='truncated'), builders.episode(3)]
    out = builders.run_transform(
        lambda data: data.apply(adders.n_step(3, 0.5)).apply(adders.chunks(2, 3)),
        episodes,
        'rlds',
    )
    n_step = builders.run_transform(adders.n_step(3, 0.5), episodes, 'rlds')
    for steps, want in zip(out, n_step, strict=True):
        for field in (types.N_STEP_RETURN, types.NEXT_OBSERVATION, types.N_STEP_LENGTH):
            np.testing.assert_array_equal(steps[field], want[field])
        # The n-step window is the chunk's real positions (under 'ignored').
        real = (~steps[types.CHUNK_IS_PAD]).sum(-1)
        np.testing.assert_array_equal(steps[types.N_STEP_LENGTH], real)


# --- Strings, fill_padding, TFDS data ----------------------------------------------------


def test_chunks_gather_string_leaves():
    frames = np.array([b'jpeg0', b'jpeg1', b'jpeg2'])
    steps = builders.episode(3, observation={'image': frames}, ending='truncated')
    for fill, pad in (('edge', b'jpeg0'), ('zero', b'')):
        out = builders.run_transform(adders.chunks(2, 1, fill=fill), [steps], 'rlds')[0]
        np.testing.assert_array_equal(
            out[types.OBSERVATION]['image'],
            [[pad, b'jpeg0'], [b'jpeg0', b'jpeg1'], [b'jpeg1', b'jpeg2']],
        )


@_SETTINGS
@given(
    episodes=streams(),
    history=st.integers(1, 9),
    horizon=st.integers(1, 9),
    final_action=st.sampled_from(['ignored', 'recorded']),
)
def test_fill_padding_turns_zero_fill_into_edge_fill(episodes, history, horizon, final_action):
    options = dict(history=history, horizon=horizon, final_action=final_action)
    edge = builders.run_transform(adders.chunks(**options), episodes, 'tensors')
    zero = builders.run_transform(adders.chunks(**options, fill='zero'), episodes, 'tensors')
    for edge_steps, zero_steps in zip(edge, zero, strict=True):
        keep = ~zero_steps[types.CHUNK_IS_PAD][:, 0]  # chunks with a real action
        filled = adders.fill_padding(zero_steps, adders.ChunkOptions(**options))
        want = tf.nest.map_structure(lambda x, keep=keep: x[keep], edge_steps)
        got = tf.nest.map_structure(lambda x, keep=keep: np.asarray(x)[keep], filled)
        assert_same(got, want)
        zeroed = adders.fill_padding(edge_steps, adders.ChunkOptions(**options, fill='zero'))
        assert_same(tf.nest.map_structure(np.asarray, zeroed), zero_steps)


def test_chunks_on_data_written_by_tfds(users_dir):
    # TFDS' own writer with its defaults: shuffled shards, lengths 1 to 1,000, both
    # endings, images and strings.
    given_steps = builders.read_episodes(load(users_dir).take(12))
    out = builders.read_episodes(load(users_dir).take(12).apply(adders.chunks(3, 5)))
    assert any(len(steps[types.IS_FIRST]) > 5 for steps in given_steps)
    for steps, raw in zip(out, given_steps, strict=True):
        assert_same(steps, chunk_references.reference_chunks(raw, 3, 5))


def test_chunks_of_a_source_run_in_its_decoding_map_and_select_from_it(users_dir):
    # What `load` returns has a source: the chunks are made in its own per-episode map, and
    # `take`/`skip` of the output select the source's records (nothing else decoded).
    chunked = load(users_dir).apply(adders.chunks(2, 3, final_action='recorded'))
    assert isinstance(episodes_lib.find_source(chunked), sources.StageMappedSource)
    selected = builders.read_episodes(chunked.skip(3).take(4))
    from_tensors = episodes_lib.to_episode_tensors(load(users_dir)).skip(3).take(4)
    unfused = builders.read_episodes(
        from_tensors.apply(adders.chunks(2, 3, final_action='recorded'))
    )
    assert len(selected) == len(unfused) == 4
    for got, want in zip(selected, unfused, strict=True):
        assert_same(got, want)


# --- Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'make,match',
    [
        (lambda: adders.chunks(0, 2), r'history=0 is not valid'),
        (lambda: adders.chunks(2, 0), r'horizon=0 is not valid'),
        (lambda: adders.chunks(2, 2, episodes_per_call=0), r'episodes_per_call=0'),
        (lambda: adders.chunks(2, 2, final_action='last'), r"final_action='last' is not valid"),
        (lambda: adders.chunks(2, 2, fill='mean'), r"fill='mean' is not valid"),
        (lambda: adders.chunks(2, 2, history_fields=[1]), r'history_fields=\[1\] is not valid'),
        (
            lambda: adders.chunks(2, 2, chunk_fields=['action', 'observation']),
            r"Fields \['observation'\] are in both history_fields and chunk_fields",
        ),
    ],
)
def test_bad_chunk_options_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_chunks_name_a_missing_field():
    with pytest.raises(ValueError, match=r"chunks needs step field\(s\) \['proprio'\]"):
        builders.dataset([builders.episode(3)], 'rlds').apply(
            adders.chunks(2, 2, history_fields='proprio')
        )


def test_chunks_refuse_to_run_twice():
    once = builders.dataset([builders.episode(3)], 'tensors').apply(adders.chunks(2, 2))
    with pytest.raises(ValueError, match=r'chunks adds step field\(s\) \[.history_is_pad'):
        once.apply(adders.chunks(2, 2, history_fields=(), chunk_fields=()))


def test_the_benchmark_floor_makes_what_chunks_makes(users_dir):
    """`benchmarks.chunks`' floor stands for chunks' output: same fields, shapes, dtypes."""
    from benchmarks import chunks as chunks_benchmark

    source = load(users_dir).take(3)
    made = {
        name: episodes_lib.to_episode_tensors(source.apply(transform))
        for name, transform in (
            ('chunks', adders.chunks(2, 8)),
            ('floor', chunks_benchmark.make_window_sized_zeros(2, 8)),
        )
    }
    assert made['floor'].element_spec == made['chunks'].element_spec
    for chunked, zeros in zip(*made.values(), strict=True):
        shapes = tf.nest.map_structure(lambda x: x.shape, chunked)
        assert tf.nest.map_structure(lambda x: x.shape, zeros) == shapes
