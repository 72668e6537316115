"""`ExportOptions`: one value for every export, keywords as overrides; the rebuilder registry."""

from __future__ import annotations

import dataclasses

import pytest

from rlds_reverb.core import types
from rlds_reverb.export import rebuilders, reverb_export
from rlds_reverb.export.options import ExportOptions, describe_default
from rlds_reverb.transform import items


def test_options_are_normalized_once():
    options = ExportOptions(on_invalid='skip', episode_fields='episode_return')
    assert options.on_invalid is types.ValidationMode.SKIP
    assert options.episode_fields == ('episode_return',)
    assert ExportOptions(item=items.Sequence(8, 4)).period == 4
    assert ExportOptions(item=items.Episode(50)).period == 50
    assert ExportOptions().period is None


@pytest.mark.parametrize(
    ('field', 'value', 'match'),
    [
        ('on_invalid', 'report', "on_invalid='report' is not an export mode"),
        ('on_invalid', 'never', 'on_invalid'),
        ('batch_items', 0, 'batch_items=0 is not valid'),
        ('episodes_per_shard', 0, 'episodes_per_shard=0 is not valid'),
        ('part_rows', 0, 'part_rows=0 is not valid'),
        ('max_copy_bytes', -1, 'max_copy_bytes=-1 is not valid'),
        ('timeout_ms', -2, 'timeout_ms=-2 is not valid'),
        ('item', items.NStep(3, 0.99), 'names the items.Sequence or items.Episode'),
        ('item', items.Sequence(4, end='last'), "windows of end='last' cannot be placed"),
    ],
)
def test_each_option_is_checked_where_it_is_defined(field, value, match):
    with pytest.raises(ValueError, match=match):
        ExportOptions(**{field: value})
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(ExportOptions(), **{field: value})


def test_keywords_are_fields_of_the_options(tmp_path):
    with pytest.raises(TypeError, match=r'export_table\(\) got unexpected keyword argument'):
        reverb_export.export_table(tmp_path / 'out', 'replay', checkpoint=tmp_path, item_kind=1)
    with pytest.raises(ValueError, match=r'expected ExportOptions\(\.\.\.\)'):
        reverb_export.export_table(tmp_path / 'out', 'replay', checkpoint=tmp_path, options={})
    # A keyword overrides the options' field; the value given is not changed.
    options = ExportOptions(on_invalid='skip')
    with pytest.raises(ValueError, match="on_invalid='report'"):
        reverb_export.export_table(
            tmp_path / 'out', 'replay', checkpoint=tmp_path, options=options, on_invalid='report'
        )
    assert options.on_invalid is types.ValidationMode.SKIP


def test_the_command_line_shows_the_options_defaults():
    assert describe_default('name') == "'reverb_export'"
    assert describe_default('on_invalid') == "'raise'"


def test_every_export_kind_has_one_rebuilder():
    assert set(rebuilders.REBUILDERS) == set(rebuilders.ExportKind)
    for kind, rebuilder in rebuilders.REBUILDERS.items():
        assert rebuilder.kind is kind
        assert rebuilder('replay', period=2).numbers_rows is (
            kind is not rebuilders.ExportKind.WHOLE_EPISODES
        )
