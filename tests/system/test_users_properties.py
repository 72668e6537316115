"""Property tests on generated users' datasets: push, Beam push and export against NumPy.

Each example is a dataset written by TFDS's own builder with its defaults
(`tests/users_data.py`: shuffled by key hash, read back with shards interleaved 16 records
at a time), drawn over episode lengths (1 to 1,000), shard counts and sizes, endings and
item kinds. For each:

* `push` into one server gives the items of the plain NumPy reference
  (`tests/item_references.py`), each exactly once;
* `push_with_beam` into two servers gives the same items, each exactly once over both;
* `export_table(push(x))` gives back `x` for every kind docs/export.md
  says exports (two-step tables lose single-step episodes, which make no item:
  docs/semantics.md §10).

One module-scoped server holds a table per kind; the Beam servers are two more in-process
servers; the export server has a checkpointer in tmp. Every table is emptied before each
example.
"""

from __future__ import annotations

import itertools

import hypothesis
import numpy as np
import pytest
import reverb
import tree
from hypothesis import strategies as st
from reverb.platform import checkpointers_lib

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import item_references as refs
from tests import reverb_tables, users_data

pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')  # The `beam` extra.
# About 90 s for the module on a loaded 2-core host (a TFDS write per example).
pytestmark = pytest.mark.slow

KINDS = {
    'two_step': items.TwoStep(),
    'n_step_1': items.NStep(1, 0.9),
    'n_step_3': items.NStep(3, 0.8),
    'seq_truncate': items.Sequence(5, 2, end='truncate'),
    'seq_pad': items.Sequence(4, 3, end='pad'),
    'seq_drop': items.Sequence(3, 3, end='drop'),
    'seq_last': items.Sequence(4, 2, end='last'),
    'episode': items.Episode(1000),
    'episode_split': items.Episode(16, overflow='split'),
    'episode_truncate': items.Episode(16, overflow='truncate'),
}
# Kinds that export (docs/export.md): (kind, add_ids, item= for export).
EXPORTS = {
    'episode': (items.Episode(1000), False, None),
    'two_step': (items.TwoStep(), False, None),
    'two_step_ids': (items.TwoStep(), True, None),
    'seq_pad_ids': (items.Sequence(4, 2, end='pad'), True, None),
    'seq_truncate_ids': (items.Sequence(5, 3, end='truncate'), True, None),
    'seq_pad': (items.Sequence(4, 4, end='pad'), False, items.Sequence(4, 4, end='pad')),
    'episode_split': (
        items.Episode(16, overflow='split'),
        False,
        items.Episode(16, overflow='split'),
    ),
}
_SAMPLE = users_data.UsersSpec((3, 1, 2), num_shards=1, images=False, strings=False)
_NAMES = itertools.count()

# Lengths 1 to 1,000, mostly short (each example stays a few thousand steps at most).
_LENGTH = st.one_of(st.integers(1, 3), st.integers(1, 30), st.integers(1, 30), st.integers(1, 1000))


@st.composite
def users_specs(draw, *, max_episodes: int = 60, flag_discounts: bool = False):
    """Draws a `UsersSpec`: episode lengths, shard count (so shard size), endings, seed."""
    lengths = tuple(draw(st.lists(_LENGTH, min_size=1, max_size=max_episodes)))
    num_shards = draw(st.integers(1, min(3, len(lengths))))
    terminated = tuple(draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths))))
    return users_data.UsersSpec(
        lengths,
        num_shards=num_shards,
        images=False,
        strings=False,
        terminated=terminated,
        seed=draw(st.integers(0, 2**16)),
        flag_discounts=flag_discounts,
    )


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp('users_properties')


@pytest.fixture(scope='module')
def kind_tables(workdir) -> list[reverb.Table]:
    """A table per `KINDS` entry; new `reverb.Table`s on every call of the returned function."""
    sample = load(users_data.write(workdir / 'sample', _SAMPLE))
    signatures = {name: tables.signature_for(kind, sample) for name, kind in KINDS.items()}
    return lambda: [
        reverb_tables.make_fifo_table(name, signature, max_size=1_000_000)
        for name, signature in signatures.items()
    ]


@pytest.fixture(scope='module')
def server(kind_tables):
    running = reverb.Server(kind_tables(), port=None)
    yield running
    running.stop()


@pytest.fixture(scope='module')
def beam_servers(kind_tables):
    running = [reverb.Server(kind_tables(), port=None) for _ in range(2)]
    yield running
    for one in running:
        one.stop()


@pytest.fixture(scope='module')
def export_server(workdir):
    sample = load(users_data.write(workdir / 'export_sample', _SAMPLE))
    made = [
        tables.uniform(
            name,
            max_size=1_000_000,
            signature=tables.signature_for(kind, sample, add_ids=add_ids),
        )
        for name, (kind, add_ids, _) in EXPORTS.items()
    ]
    (workdir / 'ckpt').mkdir()  # Export names it; Reverb makes it only when it checkpoints.
    checkpointer = checkpointers_lib.DefaultCheckpointer(str(workdir / 'ckpt'))
    running = reverb.Server(made, port=None, checkpointer=checkpointer)
    yield running
    running.stop()


def _write(workdir, spec: users_data.UsersSpec):
    return users_data.write(workdir / f'data{next(_NAMES)}', spec)


def _read_table(server: reverb.Server, table: str) -> list:
    client = reverb.Client(f'localhost:{server.port}')
    return [sample.data for sample in reverb_tables.read_items(client, table)]


_SETTINGS = dict(
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
    derandomize=True,  # The same examples on every run (CI), and no example database.
    database=None,
)


# --- push into one server == NumPy reference ---------------------------------------------------


@hypothesis.settings(max_examples=10, **_SETTINGS)
@hypothesis.given(spec=users_specs(), kind_name=st.sampled_from(sorted(KINDS)))
def test_push_gives_the_reference_items_each_once(workdir, server, spec, kind_name):
    reverb_tables.clean_client(server)
    directory = _write(workdir, spec)
    kind = KINDS[kind_name]
    stats = rlds_reverb.push(load(directory), f'localhost:{server.port}', kind_name, item=kind)
    expected = refs.reference_items(kind, users_data.make_episodes(spec))
    assert stats.items == {kind_name: len(expected)}
    assert (stats.episodes, stats.steps) == (len(spec.lengths), spec.num_steps)
    refs.assert_same_items(_read_table(server, kind_name), expected, where=kind_name)


# --- push_with_beam into two servers == NumPy reference ------------------------------------------

# A shape that fails on today's main: two shuffled shards of 20 episodes of unequal lengths.
_BEAM_FAILS = users_data.UsersSpec(
    tuple(range(1, 41)), num_shards=2, images=False, strings=False, seed=3
)


@hypothesis.settings(
    max_examples=3, phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate], **_SETTINGS
)
@hypothesis.example(spec=_BEAM_FAILS, kind_name='two_step')
@hypothesis.given(spec=users_specs(), kind_name=st.sampled_from(sorted(KINDS)))
def test_push_with_beam_gives_the_reference_items_each_once(workdir, beam_servers, spec, kind_name):
    for one in beam_servers:
        reverb_tables.clean_client(one)
    directory = _write(workdir, spec)
    kind = KINDS[kind_name]
    addresses = [f'localhost:{one.port}' for one in beam_servers]
    result = pipeline.push_with_beam(directory, addresses, kind_name, item=kind)
    expected = refs.reference_items(kind, users_data.make_episodes(spec))
    assert result.items == len(expected)
    actual = [item for one in beam_servers for item in _read_table(one, kind_name)]
    refs.assert_same_items(actual, expected, where=f'beam {kind_name}')


# --- export(push(x)) == x -------------------------------------------------------------------------


def _steps_by_origin(episodes) -> dict[int, dict]:
    result = {}
    for episode in episodes:
        steps = episode[types.STEPS]
        result[int(steps[types.OBSERVATION][users_data.STATE][0, 0])] = steps
    return result


@hypothesis.settings(max_examples=6, **_SETTINGS)
@hypothesis.given(
    spec=users_specs(max_episodes=30, flag_discounts=True),
    export_name=st.sampled_from(sorted(EXPORTS)),
)
def test_export_of_push_gives_back_the_dataset(workdir, export_server, spec, export_name):
    kind, add_ids, export_item = EXPORTS[export_name]
    original = users_data.make_episodes(spec)
    if isinstance(kind, items.TwoStep):  # Single-step episodes make no two-step item.
        original = [e for e in original if len(e[types.STEPS][types.IS_FIRST]) > 1]
    hypothesis.assume(original)
    reverb_tables.clean_client(export_server)
    directory = _write(workdir, spec)
    address = f'localhost:{export_server.port}'
    rlds_reverb.push(load(directory), address, export_name, item=kind, add_ids=add_ids)
    out = workdir / f'export{next(_NAMES)}' / '1.0.0'
    rlds_reverb.export_table(
        out,
        export_name,
        server=address,
        server_checkpoint_dir=workdir / 'ckpt',
        item=export_item,
    )
    want = _steps_by_origin(original)
    got = _steps_by_origin(users_data.read_with_tfds(out))
    assert sorted(got) == sorted(want)
    for index, steps in want.items():
        flat_want = dict(tree.flatten_with_path(steps))
        flat_got = dict(tree.flatten_with_path(got[index]))
        assert sorted(flat_got) == sorted(flat_want), index
        for path, value in flat_want.items():
            assert flat_got[path].dtype == value.dtype, (index, path)
            np.testing.assert_array_equal(flat_got[path], value, err_msg=f'{index} {path}')
