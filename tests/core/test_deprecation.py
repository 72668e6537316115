"""The 0.1 import paths and argument names keep working, with a `DeprecationWarning`."""

from __future__ import annotations

import importlib
import sys

import pytest

import rlds_reverb
from rlds_reverb.core import deprecation
from tests import builders

_NEW_NAMES = sorted(deprecation.MOVED_MODULES)


def _import_fresh(name: str):
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize('old', _NEW_NAMES)
def test_old_module_paths_import_with_a_warning_naming_the_new_home(old):
    with pytest.warns(DeprecationWarning, match=f'{old} moved to .* works until 0.3'):
        module = _import_fresh(old)
    target = deprecation.MOVED_MODULES[old]
    if isinstance(target, str):
        assert module is importlib.import_module(target)
    else:
        for name, owner in target.items():
            assert getattr(module, name) is getattr(importlib.import_module(owner), name)


@pytest.mark.parametrize('alias', sorted(deprecation.PUBLIC_ALIASES))
def test_public_short_names_are_the_new_modules_without_warnings(alias, recwarn):
    module = _import_fresh(alias)
    assert module is importlib.import_module(deprecation.PUBLIC_ALIASES[alias])
    assert getattr(rlds_reverb, alias.rpartition('.')[2]) is module
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_public_api_names_resolve():
    for name in rlds_reverb.__all__:
        assert getattr(rlds_reverb, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        rlds_reverb.nope  # noqa: B018


def test_moved_table_lookups_still_answer_from_the_tables_module():
    from rlds_reverb.serve import table_info, tables

    with pytest.warns(DeprecationWarning, match='moved to rlds_reverb.serve.table_info'):
        assert tables.fetch_table_info is table_info.fetch_table_info
    with pytest.raises(AttributeError):
        tables.nope  # noqa: B018


def _episodes():
    return builders.rlds([builders.episode(3)])


def test_mode_argument_still_works_as_on_invalid():
    with pytest.warns(DeprecationWarning, match=r'validate\(mode=...\) is deprecated; pass on_'):
        report = rlds_reverb.validate(_episodes(), mode='report')
    assert report.ok
    with pytest.warns(DeprecationWarning, match=r'convert_rlds_to_trajectories\(mode=...\)'):
        trajectories = rlds_reverb.convert_rlds_to_trajectories(_episodes(), mode='skip')
    assert len(list(trajectories)) == 3
