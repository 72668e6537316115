"""`PushOptions` is the one place of every write option: entry points, flags, one-writer check.

Every write entry point takes `options=` and the options by name, checked against
`PushOptions`' fields; the command line's flags and the `PushOptions` it builds come from
the fields; and one function (`check_writers`) refuses the options that need one writer,
with one message, on every path that has several writers.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from rlds_reverb.cli import app, reverb_commands
from rlds_reverb.transform import items
from rlds_reverb.write import parallel, resume, resume_points, seed
from rlds_reverb.write import push as push_lib
from rlds_reverb.write.options import (
    EngineKind,
    PushOptions,
    Writers,
    check_writers,
    merge_options,
)
from tests import builders
from tests.cases.episodes import THREE_EPISODES

_OPTIONS = [field.name for field in dataclasses.fields(PushOptions)]
_CROSSING = items.Sequence(2, 1, 'continue')


def _entry_points():
    entries = [
        push_lib.push,
        resume.push_resumable,
        seed.seed_server,
        resume_points.write_remaining_items,
    ]
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')
    return [*entries, pipeline.push_with_beam]


# --- Entry points -----------------------------------------------------------------------------


def test_entry_points_take_options_and_restate_none():
    for entry in _entry_points():
        parameters = inspect.signature(entry).parameters
        assert parameters['options'].kind is inspect.Parameter.KEYWORD_ONLY, entry.__name__
        assert parameters['overrides'].kind is inspect.Parameter.VAR_KEYWORD, entry.__name__
        restated = sorted(set(parameters) & set(_OPTIONS))
        assert restated == [], f'{entry.__name__} restates {restated}'
        assert 'PushOptions' in inspect.getdoc(entry), entry.__name__


def test_an_unknown_option_is_a_type_error_listing_the_options():
    with pytest.raises(TypeError, match=r"'itme'.*the options \(PushOptions\) are item, priority"):
        merge_options(None, itme=items.TwoStep())
    with pytest.raises(TypeError, match="'itme'"):
        merge_options(PushOptions(), itme=items.TwoStep())
    episodes = builders.case_dataset(THREE_EPISODES)
    for entry in _entry_points()[:2]:  # Refused before any server is contacted.
        with pytest.raises(TypeError, match="'on_invlid'"):
            entry(episodes, 'localhost:1', 'replay', on_invlid='skip')
    with pytest.raises(TypeError, match="'on_invlid'"):
        seed.seed_server(episodes, on_invlid='skip')
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')
    with pytest.raises(TypeError, match="'on_invlid'"):
        pipeline.push_with_beam('/no/data', 'localhost:1', 'replay', on_invlid='skip')


def test_an_option_given_both_ways_is_refused_on_every_entry_point():
    episodes = builders.case_dataset(THREE_EPISODES)
    options = PushOptions(on_invalid='skip')
    for entry in (push_lib.push, resume.push_resumable):
        with pytest.raises(ValueError, match='add_ids given both as keyword'):
            entry(episodes, 'localhost:1', 'replay', options=options, add_ids=True)
    with pytest.raises(ValueError, match='priority given both as keyword'):
        seed.seed_server(episodes, options=options, priority=2.0)
    # A keyword at its default is no second value (the 0.2 signatures passed them all on).
    assert merge_options(options, item=None, on_invalid='raise', priority=1) is options


def test_keywords_make_the_same_options_as_the_value():
    made = merge_options(None, item=items.NStep(3, 0.99), on_invalid='skip', engine='trajectory')
    assert made == PushOptions(
        item=items.NStep(3, 0.99),
        on_invalid='skip',
        engine=EngineKind.TRAJECTORY,
    )


def test_seed_server_refuses_resume_and_checkpoint_every():
    episodes = builders.case_dataset(THREE_EPISODES)
    for given in (dict(resume=True), dict(checkpoint_every=2)):
        with pytest.raises(ValueError, match='checkpoints it once, after the push'):
            seed.seed_server(episodes, **given)


# --- One check for the options that need one writer -------------------------------------------


@pytest.mark.parametrize(
    ('given', 'writers', 'match'),
    [
        (dict(add_ids=True), Writers.PROCESSES, r'add_ids needs one writer \(add_ids numbers'),
        (dict(resume=True), Writers.PROCESSES, 'resume and checkpoint_every need one writer'),
        (dict(checkpoint_every=3), Writers.PROCESSES, 'resume and checkpoint_every need one'),
        (dict(item=_CROSSING), Writers.PROCESSES, r'items need one writer \(they cross episodes'),
        (dict(item=_CROSSING), Writers.BEAM, 'they cross episodes'),
        (dict(checkpoint_every=3), Writers.BEAM, 'checkpoint_every needs one writer'),
        (dict(add_ids=True), Writers.BEAM, None),
        (dict(resume=True), Writers.BEAM, None),
        (dict(item=_CROSSING, add_ids=True, resume=True, checkpoint_every=3), Writers.ONE, None),
    ],
)
def test_check_writers_refuses_what_needs_one_writer(given, writers, match):
    options = PushOptions(**given)
    if match is None:
        check_writers(options, writers)
        return
    with pytest.raises(ValueError, match=match):
        check_writers(options, writers)


def test_check_writers_names_every_refused_option_once_and_the_fix():
    options = PushOptions(item=_CROSSING, add_ids=True, checkpoint_every=3)
    with pytest.raises(ValueError) as info:
        check_writers(options, Writers.PROCESSES, as_flags=True)
    message = str(info.value)
    assert message.count('one writer') == 3
    assert '--add-ids needs one writer (--add-ids numbers' in message
    assert '--resume and --checkpoint-every need one writer' in message
    assert message.endswith('; use --workers 1.')


def _message(options: PushOptions, writers: Writers, *, as_flags: bool = False) -> str:
    with pytest.raises(ValueError) as info:
        check_writers(options, writers, as_flags=as_flags)
    return str(info.value)


def test_every_path_with_several_writers_refuses_with_the_one_message(run_cli, tmp_path):
    options = PushOptions(add_ids=True)
    with pytest.raises(ValueError) as info:
        parallel.check_parallel_options(options, 2)
    assert str(info.value) == _message(options, Writers.PROCESSES)
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')
    beam_options = PushOptions(checkpoint_every=2)
    with pytest.raises(ValueError) as info:  # Before the servers are contacted.
        pipeline.push_with_beam(tmp_path, 'localhost:1', 'replay', options=beam_options)
    assert str(info.value) == _message(beam_options, Writers.BEAM)
    _, _, err = run_cli('push', tmp_path, '--server', 'localhost:1', '--add-ids', '--workers', 2)
    assert _message(options, Writers.PROCESSES, as_flags=True) in err
    _, _, err = run_cli('push', tmp_path, '--servers', 'localhost:1', '--checkpoint-every', 2)
    assert _message(beam_options, Writers.BEAM, as_flags=True) in err


# --- The command line's flags come from the fields ------------------------------------------


def _parse(*argv):
    args, unknown = app.build_parser().parse_known_args([str(a) for a in argv])
    assert unknown == []
    return args


def test_every_flagged_option_reaches_push_and_serve_with_its_default():
    flagged = [f for f in dataclasses.fields(PushOptions) if PushOptions.flag_of(f)]
    assert {f.name for f in flagged} == set(_OPTIONS) - {'item', 'policy_info_fn'}
    assert reverb_commands.make_push_options(_parse('push', 'SRC')) == PushOptions()
    serve_args = _parse('serve', 'SRC', '--port', 0)
    assert reverb_commands.make_push_options(serve_args) == PushOptions()
    for field in flagged:
        assert hasattr(serve_args, field.name) != PushOptions.flag_of(field).push_only


def test_flags_give_every_option():
    argv = [
        *('push', 'SRC', '--item', 'n-step', '--n', 2, '--priority', 0.5),
        *('--on-invalid', 'skip', '--timeout-ms', 500, '--max-in-flight-items', 7),
        *('--allow-eviction', '--engine', 'trajectory', '--episode-field', 'a'),
        *('--episode-field', 'b', '--add-ids', '--resume', '--checkpoint-every', 4),
    ]
    assert reverb_commands.make_push_options(_parse(*argv)) == PushOptions(
        item=items.NStep(2, 0.99),
        priority=0.5,
        on_invalid='skip',
        timeout_ms=500,
        max_in_flight_items=7,
        allow_eviction=True,
        engine='trajectory',
        episode_fields=('a', 'b'),
        add_ids=True,
        resume=True,
        checkpoint_every=4,
    )


def test_an_invalid_flag_value_is_named_by_its_flag():
    for flag, value in (('--timeout-ms', 0), ('--checkpoint-every', 0), ('--priority', -1.5)):
        with pytest.raises(ValueError, match=f'^{flag}={value} is not valid'):
            reverb_commands.make_push_options(_parse('push', 'SRC', flag, value))
    assert PushOptions.flag_name('episode_fields') == '--episode-field'
    assert PushOptions.flag_name('timeout_ms') == '--timeout-ms'
