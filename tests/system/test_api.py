"""The declared API: static re-exports, `__all__` everywhere, errors in one module, and the
0.1 shims gone by the release that announced their removal.

The checks read the source (AST) where they can, so they need no TensorFlow and stay fast.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import rlds_reverb
from rlds_reverb.core import deprecation, errors

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_INIT = _ROOT / 'rlds_reverb' / '__init__.py'
_HEAVY = ('tensorflow', 'tf_agents', 'tensorflow_datasets', 'reverb', 'apache_beam', 'gym')


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(_ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _package_files() -> list[pathlib.Path]:
    return sorted([*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')])


def _is_public(path: pathlib.Path) -> bool:
    """Whether a module is public: no part of its dotted name begins with an underscore."""
    return not any(part.startswith('_') for part in _module_name(path).split('.'))


def _is_module(dotted: str) -> bool:
    path = _ROOT.joinpath(*dotted.split('.'))
    return path.with_suffix('.py').exists() or (path / '__init__.py').exists()


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        'TYPE_CHECKING',
        'typing.TYPE_CHECKING',
    )


def _bound_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (including `if`/`try` blocks there)."""
    names: set[str] = set()
    for node in tree.body:
        inner = [node]
        if isinstance(node, ast.If | ast.Try):
            inner = [*node.body, *node.orelse, *getattr(node, 'finalbody', [])]
            inner += [s for handler in getattr(node, 'handlers', []) for s in handler.body]
        for statement in inner:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(statement.name)
            elif isinstance(statement, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split('.')[0] for a in statement.names}
            elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = getattr(statement, 'targets', None) or [statement.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _read_all(tree: ast.Module) -> list[str] | None:
    """The module's `__all__` if it assigns one literal list of strings, else None."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, 'target', None)
        if isinstance(target, ast.Name) and target.id == '__all__':
            return ast.literal_eval(node.value)
    return None


def _static_exports() -> dict[str, str]:
    """The `if TYPE_CHECKING:` imports of `rlds_reverb/__init__.py`, as `_EXPORTS` writes them."""
    tree = ast.parse(_INIT.read_text())
    blocks = [node for node in tree.body if _is_type_checking(node)]
    assert len(blocks) == 1, 'one `if TYPE_CHECKING:` block of re-exports'
    found = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            # `import x as x`: the explicit re-export type checkers look for.
            assert alias.asname == alias.name, f'{ast.unparse(node)}: write `as {alias.name}`'
            assert alias.name not in found, f'{alias.name} imported twice'
            submodule = f'{node.module}.{alias.name}'
            found[alias.name] = (
                submodule if _is_module(submodule) else f'{node.module}:{alias.name}'
            )
    return found


def test_static_reexports_all_and_lazy_table_agree():
    assert _static_exports() == rlds_reverb._EXPORTS  # noqa: SLF001
    declared = _read_all(ast.parse(_INIT.read_text()))
    assert declared == rlds_reverb.__all__
    assert len(declared) == len(set(declared))
    assert set(declared) == {'__version__', *rlds_reverb._EXPORTS}  # noqa: SLF001


def test_short_module_names_are_the_public_aliases():
    short = {old.rpartition('.')[2]: new for old, new in deprecation.PUBLIC_ALIASES.items()}
    static = _static_exports()
    assert {name: static[name] for name in short} == short


def test_the_typed_usage_file_uses_every_public_name():
    # What mypy checks in `make lint` (mypy.ini) covers the whole declared API.
    tree = ast.parse((_ROOT / 'tests' / 'typing' / 'public_api.py').read_text())
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == 'rlds_reverb'
    }
    used |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == 'rlds_reverb'
        for alias in node.names
    }
    assert sorted(set(rlds_reverb.__all__) - used) == []


def test_lazy_getattr_is_hidden_from_type_checkers():
    # A module `__getattr__` makes type checkers accept any name (a typo would pass).
    tree = ast.parse(_INIT.read_text())
    top_level = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert '__getattr__' not in top_level
    assert callable(rlds_reverb.__getattr__)


def test_import_rlds_reverb_imports_no_heavy_library(subprocess_env):
    code = (
        'import sys, rlds_reverb\n'
        'assert rlds_reverb.__all__ and "items" in dir(rlds_reverb)\n'
        f'print(sorted({{m.split(".")[0] for m in sys.modules}} & set({_HEAVY!r})))'
    )
    out = subprocess.run(
        [sys.executable, '-c', code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == '[]'


def _public_modules() -> list[pathlib.Path]:
    modules = []
    for path in _package_files():
        if not _is_public(path) or path.name == '__main__.py':
            continue
        tree = ast.parse(path.read_text())
        # A package `__init__` holding only its docstring declares nothing.
        if path.name == '__init__.py' and not _bound_names(tree):
            continue
        modules.append(path)
    return modules


@pytest.mark.parametrize(
    'path', _public_modules(), ids=lambda p: _module_name(p) if isinstance(p, pathlib.Path) else p
)
def test_every_public_module_declares_all_of_names_it_binds(path):
    tree = ast.parse(path.read_text())
    declared = _read_all(tree)
    assert declared is not None, f'{_module_name(path)} has no literal `__all__ = [...]`'
    assert len(declared) == len(set(declared)), 'a name twice in __all__'
    assert not set(declared) - _bound_names(tree), 'names in __all__ the module does not bind'
    assert all(not n.startswith('_') for n in declared if n != '__version__')


def test_all_names_exist_at_run_time():
    # The modules `import rlds_reverb` users reach first; the rest are checked from the source.
    for name in ('rlds_reverb.core.types', 'rlds_reverb.core.errors', 'rlds_reverb.core.specs'):
        module = importlib.import_module(name)
        assert [n for n in module.__all__ if not hasattr(module, n)] == []


def _exception_classes() -> dict[str, list[str]]:
    """Module -> the classes it defines whose bases name an error or exception class."""
    found: dict[str, list[str]] = {}
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                re.search(r'(Error|Exception|Warning)$', ast.unparse(base)) for base in node.bases
            ):
                found.setdefault(_module_name(path), []).append(node.name)
    return found


def test_every_exception_class_lives_in_core_errors():
    classes = _exception_classes()
    assert set(classes) == {'rlds_reverb.core.errors'}, classes
    assert sorted(classes['rlds_reverb.core.errors']) == sorted(errors.__all__)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.RldsReverbError)


# Errors that moved into core/errors: their old modules keep the name.
_MOVED_ERRORS = {
    'rlds_reverb.write.resume': ['ResumeError'],
    'rlds_reverb.distribute.pipeline': ['DistributedPushError'],
}


@pytest.mark.parametrize('module_name', sorted(_MOVED_ERRORS))
def test_moved_errors_keep_their_old_names(module_name):
    if module_name.startswith('rlds_reverb.distribute'):
        pytest.importorskip('apache_beam')
    module = importlib.import_module(module_name)
    for name in _MOVED_ERRORS[module_name]:
        assert getattr(module, name) is getattr(errors, name)
        assert name in module.__all__


def _parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r'\d+', text.split('rc')[0])[:3])


def _list_shims() -> list[str]:
    """Every deprecated path still served: moved modules, moved names, renamed arguments."""
    shims = [f'module {old}' for old in sorted(deprecation.MOVED_MODULES)]
    for path in _package_files():
        if path.name == 'deprecation.py':
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
                ('make_moved_getattr', 'warn_renamed_argument')
            ):
                shims.append(f'{_module_name(path)}:{node.lineno} {ast.unparse(node.func)}')
    return shims


def _list_outlived_shims(version: str) -> list[str]:
    """The shims still there at `version`, if it is the release that removes them."""
    if _parse_version(version) >= _parse_version(deprecation.REMOVED_IN):
        return _list_shims()
    return []


def test_deprecated_paths_do_not_outlive_their_announced_removal():
    outlived = _list_outlived_shims(rlds_reverb.__version__)
    assert not outlived, (
        f'rlds-reverb {rlds_reverb.__version__} keeps paths announced as removed in '
        f'{deprecation.REMOVED_IN}; remove them (and their tests): {outlived}'
    )


def test_the_removal_check_trips_at_the_removal_release():
    shims = _list_shims()
    assert _list_outlived_shims(f'{deprecation.REMOVED_IN}.0') == shims
    assert _list_outlived_shims('0.2.0') == []
    if _parse_version(rlds_reverb.__version__) < _parse_version(deprecation.REMOVED_IN):
        assert shims, 'the 0.1 paths are still served, and found'


def test_version_is_not_behind_the_release_the_shims_name():
    # The shims say the modules "moved in rlds-reverb 0.2" (version.py said 0.1.0).
    assert _parse_version(rlds_reverb.__version__) >= (0, 2)
    assert 'in rlds-reverb 0.2;' in pathlib.Path(deprecation.__file__).read_text()
