"""Errors declare their fields: constructor arguments that pickle, never set afterwards.

The multi-process push and Beam's workers may send errors between processes, so every
error keeps its message, its fields and its notes through a pickle round trip.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import pickle

import pytest

from rlds_reverb.core import errors

_ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What `InvalidEpisodeError` needs of a problem (`check.validation.Problem`)."""

    text: str

    def describe(self) -> str:
        return self.text


_PUSH_FIELDS = dict(episodes_written=3, items_written=7, counts_from_dataset_start=True)
_ERRORS = [
    errors.SourceError('no steps', tf_agents_message='No dataset representing RLDS steps'),
    errors.SourceNotFoundError('No RLDS dataset at /x'),
    errors.D4rlFileError('a key is missing'),
    errors.SpecMismatchError('specs differ:', ['a: expected int32[], found float32[]']),
    errors.SpecMismatchError(
        'TF-Agents sentence.', ['a: x'], tf_agents_message='t', list_differences=False
    ),
    errors.InvalidEpisodeError(4, [_Problem('episode 4, step 1: reward is NaN')]),
    errors.InvalidEpisodeError(4, [_Problem('p')], episodes_written=2),
    errors.PushError('failed', **_PUSH_FIELDS),
    errors.TableTooSmallError('too small', episodes_written=1, items_written=2),
    errors.EpisodeTooLongError('too long', episodes_written=0, items_written=0),
    errors.ResumeError('other data', episodes_written=5, items_written=9),
    errors.DistributedPushError('failed', episodes_written=0, items_written=4),
    errors.ReverbConnectionError('No Reverb server answered at localhost:1'),
    errors.EmptyTableError('no sample'),
    errors.ExportError('cannot export'),
]


def _fields(error: BaseException) -> dict:
    fields = {k: v for k, v in vars(error).items() if not k.startswith('_')}
    return {**fields, 'notes': getattr(error, '__notes__', [])}


@pytest.mark.parametrize('error', _ERRORS, ids=lambda e: f'{type(e).__name__}')
def test_errors_keep_their_message_fields_and_notes_through_pickle(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert _fields(copy) == _fields(error)


def test_declared_fields_are_constructor_arguments():
    invalid = errors.InvalidEpisodeError(4, [_Problem('p')], episodes_written=2)
    assert invalid.episodes_written == 2
    assert invalid.__notes__ == ['2 episode(s) before it were fully written.']
    assert errors.InvalidEpisodeError(4, [_Problem('p')]).episodes_written is None
    push = errors.PushError('failed', **_PUSH_FIELDS)
    assert (push.episodes_written, push.items_written, push.counts_from_dataset_start) == (
        3,
        7,
        True,
    )
    listed = errors.SpecMismatchError('specs differ:', ['a: x', 'b: y'])
    assert str(listed) == 'specs differ:\n  a: x\n  b: y'
    unlisted = errors.SpecMismatchError('sentence.', ['a: x'], list_differences=False)
    assert (str(unlisted), unlisted.differences) == ('sentence.', ['a: x'])


# The fields errors declare: no module sets one on an error after it is made.
_DECLARED = {
    'counts_from_dataset_start',
    'differences',
    'episode_index',
    'episodes_written',
    'items_written',
    'list_differences',
    'problems',
    'tf_agents_message',
}


def test_no_module_sets_an_error_field_after_construction():
    found = []
    for path in [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]:
        if path.name == 'errors.py' and path.parent.name == 'core':
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in _DECLARED:
                    found.append(f'{path.relative_to(_ROOT)}:{node.lineno} .{target.attr}')
    assert found == []
