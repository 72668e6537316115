"""One case table of write options, run through every write path: the same items land.

Each case is a set of `PushOptions` (item kind, `on_invalid` skip or raise, episode fields,
ids). Every case runs through `push`, `push_resumable` (resuming after the first episodes
were pushed), `push_with_beam` and `rlds-reverb push` (one process, and `--workers 2`,
`--servers`), into real in-process Reverb servers, and the table is compared item by item
with the plain NumPy references of `tests/item_references.py`.

The dataset (`users_data` episodes without images or strings, written in index order in
shards of 4, so that `load`'s order and Beam's shard order agree) holds episode metadata,
and one invalid episode in its `invalid` variant.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import reverb

from rlds_reverb.core import errors, types
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items
from rlds_reverb.write import parallel, resume, resume_points
from rlds_reverb.write import push as push_lib
from rlds_reverb.write.options import PushOptions, merge_options
from tests import builders, reverb_tables, users_data
from tests import item_references as refs
from tests.cases.episodes import THREE_EPISODES

_TABLE = 'replay'
_SPEC = users_data.UsersSpec((3, 1, 5, 2, 8, 4, 6, 2, 7), images=False, strings=False, seed=3)
_INVALID = 4  # Its reward at step 1 is NaN in the invalid variant.
_PER_SHARD = 4
_METADATA = (users_data.METADATA,)


@dataclasses.dataclass(frozen=True)
class Case:
    """One option set: the options, whether the data holds the invalid episode, CLI flags."""

    name: str
    options: PushOptions
    invalid: bool
    flags: tuple[str, ...]


def _fields_flags(options: PushOptions) -> tuple[str, ...]:
    flags = [a for field in options.episode_fields for a in ('--episode-field', field)]
    return (*flags, *(['--add-ids'] if options.add_ids else []))


def _case(name, item, item_flags, *, invalid=False, **options) -> Case:
    made = PushOptions(item=item, **options)
    flags = (*item_flags, '--on-invalid', made.on_invalid.value, *_fields_flags(made))
    return Case(name, made, invalid, flags)


CASES = [
    _case(
        'two_step-skip', items.TwoStep(), ['--item', 'two-step'], invalid=True, on_invalid='skip'
    ),
    _case(
        'two_step-fields-ids',
        items.TwoStep(),
        ['--item', 'two-step'],
        episode_fields=_METADATA,
        add_ids=True,
    ),
    _case(
        'n_step-fields',
        items.NStep(2, 0.9),
        ['--item', 'n-step', '--n', '2', '--gamma', '0.9'],
        episode_fields=_METADATA,
    ),
    _case(
        'n_step-raise',
        items.NStep(2, 0.9),
        ['--item', 'n-step', '--n', '2', '--gamma', '0.9'],
        invalid=True,
    ),
    _case(
        'sequence-ids-skip',
        items.Sequence(3, 2, 'pad'),
        ['--item', 'sequence', '--length', '3', '--period', '2', '--end', 'pad'],
        invalid=True,
        on_invalid='skip',
        add_ids=True,
    ),
    _case(
        'episode-fields-ids',
        items.Episode(8),
        ['--item', 'episode', '--max-length', '8'],
        episode_fields=_METADATA,
        add_ids=True,
    ),
]


def _make_episodes(invalid: bool) -> list[dict]:
    episodes = [dict(e) for e in users_data.make_episodes(_SPEC)]
    if invalid:
        steps = dict(episodes[_INVALID][types.STEPS])
        steps[types.REWARD] = steps[types.REWARD].copy()
        steps[types.REWARD][1] = np.nan
        episodes[_INVALID] = {**episodes[_INVALID], types.STEPS: steps}
    return episodes


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory) -> dict[bool, str]:
    """invalid -> the dataset directory (written in index order, shards of 4)."""
    root = tmp_path_factory.mktemp('write_paths')
    made = {}
    for invalid in (False, True):
        name = 'invalid' if invalid else 'valid'
        made[invalid] = str(
            tfds_writer.write_rlds_dataset(
                root / name / '1.0.0',
                _make_episodes(invalid),
                features=users_data.make_features(_SPEC),
                name=name,
                episodes_per_shard=_PER_SHARD,
            )
        )
    return made


def _carried(episode: dict, position: int, options: PushOptions) -> dict:
    """The episode's steps with the fields a push carries into them (the reference)."""
    steps = dict(episode[types.STEPS])
    length = len(steps[types.IS_FIRST])
    for name in options.episode_fields:
        steps[name] = {
            k: np.repeat(np.asarray(v)[None], length, 0) for k, v in episode[name].items()
        }
    if options.add_ids:
        steps[types.EPISODE_ID] = np.full(length, position, np.int64)
        steps[types.STEP_INDEX] = np.arange(length, dtype=np.int64)
    return {types.STEPS: steps}


def _expected(case: Case, *, beam: bool = False) -> list:
    """The items that land: valid episodes (skip), or those before the invalid one (raise;
    none with Beam, which counts every episode before it writes)."""
    episodes = _make_episodes(case.invalid)
    positions = range(len(episodes))
    if case.invalid:
        if case.options.on_invalid is types.ValidationMode.SKIP:
            positions = [i for i in positions if i != _INVALID]
        else:
            positions = [] if beam else range(_INVALID)
    carried = [_carried(episodes[i], i, case.options) for i in positions]
    return refs.reference_items(case.options.item, carried)


def _make_servers(case: Case, data_dir: str, count: int = 1) -> list[reverb.Server]:
    signature = tables.signature_for(
        case.options.item,
        load(data_dir),
        episode_fields=case.options.episode_fields,
        add_ids=case.options.add_ids,
    )
    return [
        reverb.Server([reverb_tables.make_fifo_table(_TABLE, signature, 10_000)], port=None)
        for _ in range(count)
    ]


def _landed(servers: list[reverb.Server]) -> list:
    return [
        sample.data
        for server in servers
        for sample in reverb_tables.read_items(reverb.Client(f'localhost:{server.port}'), _TABLE)
    ]


def _raises(case: Case):
    if case.invalid and case.options.on_invalid is types.ValidationMode.RAISE:
        failures = (errors.InvalidEpisodeError, errors.DistributedPushError)
        return pytest.raises(failures, match=f'Episode {_INVALID} is invalid')
    return _NoError()


class _NoError:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


def _run_case(case: Case, data_dirs, write, *, count: int = 1, beam: bool = False) -> None:
    """Runs `write(data_dir, addresses)`, then compares what landed with the references."""
    servers = _make_servers(case, data_dirs[case.invalid], count)
    try:
        write(data_dirs[case.invalid], [f'localhost:{s.port}' for s in servers])
        refs.assert_same_items(_landed(servers), _expected(case, beam=beam), where=case.name)
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_push_writes_the_case_items(case, data_dirs):
    def write(data_dir, addresses):
        with _raises(case):
            push_lib.push(load(data_dir), addresses[0], _TABLE, options=case.options)

    _run_case(case, data_dirs, write)


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_push_resumable_after_a_first_part_writes_the_case_items(case, data_dirs):
    def write(data_dir, addresses):
        episodes = load(data_dir)
        push_lib.push(episodes.take(2), addresses[0], _TABLE, options=case.options)
        with _raises(case):
            stats = resume.push_resumable(episodes, addresses[0], _TABLE, options=case.options)
            assert stats.episodes + stats.skipped_episodes == len(_SPEC.lengths) - 2

    _run_case(case, data_dirs, write)


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_cli_push_writes_the_case_items(case, data_dirs, run_cli):
    def write(data_dir, addresses):
        argv = ['push', data_dir, '--server', addresses[0], '--table', _TABLE, *case.flags]
        code, _, err = run_cli(*argv, '--no-progress')
        raising = case.invalid and case.options.on_invalid is types.ValidationMode.RAISE
        assert code == (1 if raising else 0), err

    _run_case(case, data_dirs, write)


@pytest.mark.slow  # Beam's DirectRunner: 5 to 20 s per case on a loaded host.
@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_push_with_beam_writes_the_case_items(case, data_dirs):
    def write(data_dir, addresses):
        with _raises(case):
            result = pipeline.push_with_beam(data_dir, addresses, _TABLE, options=case.options)
            assert result.items == len(_expected(case, beam=True))

    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')
    _run_case(case, data_dirs, write, count=2, beam=True)


@pytest.mark.slow  # Two worker processes, or Beam, per case.
@pytest.mark.parametrize('how', ['workers', 'servers'])
@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_cli_push_from_workers_or_to_servers_writes_the_case_items(case, how, data_dirs, run_cli):
    if how == 'workers' and case.options.add_ids:
        pytest.skip('--add-ids needs one writer (refused with --workers 2).')
    if how == 'servers':
        pytest.importorskip('rlds_reverb.distribute.pipeline')

    def write(data_dir, addresses):
        where = ['--workers', '2', '--server', addresses[0]]
        if how == 'servers':
            where = ['--servers', ','.join(addresses)]
        argv = ['push', data_dir, *where, '--table', _TABLE, *case.flags, '--no-progress']
        code, _, err = run_cli(*argv, subprocess=how == 'workers')
        raising = case.invalid and case.options.on_invalid is types.ValidationMode.RAISE
        assert code == (2 if raising else 0), err  # A worker's or Beam's failure.

    _run_case(case, data_dirs, write, count=2 if how == 'servers' else 1, beam=how == 'servers')


# --- The options value ------------------------------------------------------------------------


def test_options_are_normalized_and_never_changed_in_place():
    options = PushOptions(on_invalid='skip', engine='trajectory', episode_fields='agent')
    assert options.on_invalid is types.ValidationMode.SKIP
    assert options.episode_fields == ('agent',)
    assert isinstance(options.item, items.TwoStep)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.add_ids = True  # type: ignore[misc]
    assert merge_options(options) is options


@pytest.mark.parametrize(
    ('given', 'match'),
    [
        (dict(priority=-1.0), 'priority=-1.0 is not valid'),
        (dict(timeout_ms=0), 'timeout_ms=0 is not valid'),
        (dict(max_in_flight_items=0), 'max_in_flight_items=0 is not valid'),
        (dict(item='two-step'), "item='two-step' is not valid"),
        (dict(on_invalid='report'), "on_invalid='report' writes nothing"),
        (dict(engine='fast'), "engine='fast' is not valid"),
        (dict(add_ids='yes'), "add_ids='yes' is not valid; expected True or False"),
        (dict(checkpoint_every=0), 'checkpoint_every=0 is not valid'),
        (dict(episode_fields=[1]), r'episode_fields=\(1,\) is not valid'),
    ],
)
def test_invalid_options_raise_naming_the_option(given, match):
    with pytest.raises(ValueError, match=match):
        PushOptions(**given)


def test_an_option_given_both_ways_is_refused():
    with pytest.raises(ValueError, match='add_ids given both as keyword'):
        merge_options(PushOptions(), add_ids=True)
    with pytest.raises(ValueError, match='expected a PushOptions'):
        merge_options({'add_ids': True})
    assert merge_options(PushOptions(), on_invalid='raise', item=None).add_ids is False


def test_parallel_options_need_one_writer_for_ids_resume_and_stream_items():
    with pytest.raises(ValueError, match='add_ids need'):
        parallel.check_parallel_options(PushOptions(add_ids=True), 2)
    with pytest.raises(ValueError, match='cross episodes'):
        parallel.check_parallel_options(PushOptions(item=items.Sequence(2, 1, 'continue')), 2)
    with pytest.raises(ValueError, match='workers=0 is not valid'):
        parallel.check_parallel_options(PushOptions(), 0)
    assert parallel.check_parallel_options(PushOptions(add_ids=True), 1) == 1


def test_errors_moved_to_core_stay_importable_where_they_were():
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')

    assert resume.ResumeError is errors.ResumeError
    assert pipeline.DistributedPushError is errors.DistributedPushError
    assert resume.find_resume_point is resume_points.find_resume_point


def test_a_resumable_push_into_a_table_too_small_keeps_the_error_type(reverb_client):
    # E0 (2 items) and E1 (none) fit in 'tiny' (room for 2); E2 does not. The resumable
    # push used to restate this as a plain PushError.
    with pytest.raises(errors.TableTooSmallError, match='room for 2 more') as info:
        resume.push_resumable(
            builders.case_dataset(THREE_EPISODES), reverb_client, 'tiny', start_episode=0
        )
    assert 'episodes 0..1 of the dataset are fully written' in str(info.value)
    assert (info.value.episodes_written, info.value.items_written) == (2, 2)
    assert reverb_tables.table_size(reverb_client, 'tiny') == 2
