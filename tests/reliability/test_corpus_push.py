"""Every corpus case through `rlds_reverb.write.push.push` into a real Reverb server.

In skip mode exactly the valid episodes land and the server's item count equals the count
the push reports; in raise mode the error names the fault and the table holds exactly the
episodes the error says were fully written.
"""

import contextlib
import re

import pytest
import reverb
import tensorflow as tf

import rlds_reverb
from rlds_reverb import cli
from rlds_reverb.core import errors, types
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as writers
from rlds_reverb.write import resume
from tests import builders
from tests.reliability import corpus

_TABLE = 'replay'
_EXPECTED = 'expected'
_DATA = corpus.variants(data=True)
_READABLE = rlds_reverb.check.validation.Rule.READABLE.rule_id


@contextlib.contextmanager
def _server(episodes: tf.data.Dataset, item=None, max_size: int = 10_000):
    """A loopback server with `replay` and `expected` tables for `episodes`' items."""
    signature = tables.signature_for(item or items.TwoStep(), episodes)
    server = reverb.Server(
        [
            tables.uniform(name, max_size=max_size, signature=signature)
            for name in (_TABLE, _EXPECTED)
        ]
    )
    try:
        yield reverb.Client(f'localhost:{server.port}')
    finally:
        server.stop()


def _size(client: reverb.Client, table: str) -> int:
    return client.server_info(timeout=10)[table].current_size


def _items_of(episodes) -> int:
    return sum(max(len(e[types.IS_FIRST]) - 1, 0) for e in episodes)


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_skip_mode_lands_exactly_the_valid_episodes(build, variant):
    data = rlds_reverb.load(build(variant))
    valid = variant.valid_episodes()
    with _server(builders.rlds(valid)) as client:
        stats = writers.push(data, client, _TABLE, on_invalid='skip', timeout_ms=20_000)
        expected = writers.push(builders.rlds(valid), client, _EXPECTED)
        assert (stats.episodes, stats.skipped_episodes) == (len(valid), len(variant.invalid))
        assert stats.items[_TABLE] == expected.items[_EXPECTED] == _items_of(valid)
        assert _size(client, _TABLE) == stats.items[_TABLE]
        assert stats.steps == sum(len(e[types.IS_FIRST]) for e in valid)


def _raise_pattern(variant: corpus.Variant) -> str:
    fault = next(f for f in variant.faults if f.episode == variant.invalid[0])
    if fault.rule == _READABLE:
        return f'(?s)episode {fault.episode}.*{re.escape(variant.read_error)}'
    return f'(?s)Episode {fault.episode} is invalid.*{fault.pattern}'


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_raise_mode_names_the_fault_and_the_episodes_written(build, variant):
    data = rlds_reverb.load(build(variant))
    first = variant.invalid[0]
    before = variant.episodes[:first]
    with _server(builders.rlds(variant.valid_episodes())) as client:
        with pytest.raises(tf.errors.InvalidArgumentError, match=_raise_pattern(variant)) as info:
            writers.push(data, client, _TABLE, timeout_ms=20_000)
        assert info.value.episodes_written == first
        assert f'{first} episode(s) before it were fully written' in ''.join(
            getattr(info.value, '__notes__', [str(info.value)])
        ) + str(info.value)
        assert _size(client, _TABLE) == _items_of(before)


def _long_episodes() -> tf.data.Dataset:
    return builders.rlds([builders.episode(n) for n in (3, 6, 2)])


def test_episode_longer_than_the_item_limit_names_it_and_the_episodes_written():
    item = items.Episode(max_length=4)
    with _server(_long_episodes(), item) as client:
        with pytest.raises(
            errors.EpisodeTooLongError,
            match=r'Episode 1: the episode has 6 steps, more than Episode\(max_length=4\).*'
            r'1 episode\(s\) were fully written',
        ) as info:
            writers.push(_long_episodes(), client, _TABLE, item=item)
        assert (info.value.episodes_written, info.value.items_written) == (1, 1)
        assert _size(client, _TABLE) == 1


def test_episodes_longer_than_the_table_are_refused_before_evicting_any():
    with _server(_long_episodes(), max_size=6) as client:
        with pytest.raises(
            errors.TableTooSmallError,
            match=r'room for 6 more item\(s\).*episode 1 would bring this push to 7 items.*'
            r'1 episode\(s\) were fully written \(2 items\)',
        ) as info:
            writers.push(_long_episodes(), client, _TABLE)
        assert info.value.episodes_written == 1
        assert _size(client, _TABLE) == 2


def test_cli_push_of_a_bad_directory_exits_non_zero_without_traceback(build, run_cli):
    variant = next(v for v in _DATA if v.id == 'nan_reward-tfds')
    directory = build(variant)
    with _server(rlds_reverb.load(directory)) as client:
        argv = ['push', directory, '--server', client.server_address, '--table', _TABLE]
        code, _, err = run_cli(*argv, '--no-progress')
        assert code == cli.EXIT_INVALID_DATA, err
        assert re.search(variant.faults[0].pattern, err), err
        assert 'Traceback' not in err
        code, _, err = run_cli(*argv, '--no-progress', '--on-invalid', 'skip')
        assert code == 0, err
        # The raise-mode push above wrote episode 0 before stopping at episode 1.
        before = _items_of(variant.episodes[:1])
        assert _size(client, _TABLE) == before + _items_of(variant.valid_episodes())


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_resume_counts_exactly_what_a_skip_push_writes_per_episode(build, variant):
    counts = resume.count_items_per_episode(rlds_reverb.load(build(variant)), items.TwoStep())
    expected = [
        _items_of([episode]) if index in variant.valid else 0
        for index, episode in enumerate(variant.episodes)
    ]
    assert counts.tolist() == expected
