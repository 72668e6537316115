"""The declared API: static re-exports, `__all__` everywhere, errors in one module and all
reachable from `rlds_reverb`, and no 0.1 shim left (removed in 0.3).

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
from rlds_reverb.core import errors

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


_SHORT_MODULES = {
    'checkpoints': 'rlds_reverb.serve.checkpoints',
    'items': 'rlds_reverb.transform.items',
    'observers': 'rlds_reverb.write.observers',
    'priorities': 'rlds_reverb.learn.priorities',
    'sampling': 'rlds_reverb.learn.sampling',
    'tables': 'rlds_reverb.serve.tables',
}


def test_short_module_names_are_the_room_modules():
    static = _static_exports()
    assert {name: static[name] for name in _SHORT_MODULES} == _SHORT_MODULES
    for name, module in _SHORT_MODULES.items():
        assert getattr(rlds_reverb, name) is importlib.import_module(module)


def test_every_error_class_and_the_learner_are_reachable_from_the_package():
    for name in errors.__all__:
        assert getattr(rlds_reverb, name) is getattr(errors, name), name
        assert name in rlds_reverb.__all__
    assert rlds_reverb.LearnerDataset.__name__ == 'LearnerDataset'
    try:
        raise rlds_reverb.PushError('x', episodes_written=0, items_written=0)
    except rlds_reverb.RldsReverbError as e:
        assert isinstance(e, rlds_reverb.PushError)


def test_the_package_docstring_starts_with_the_verbs_in_data_flow_order():
    doc = rlds_reverb.__doc__
    verbs = ['load', 'validate', 'adders', 'push', 'LearnerDataset', 'export']
    positions = [doc.index(f'\n    {verb} ') for verb in verbs]
    assert positions == sorted(positions), positions
    assert positions[0] < doc.index('core/')


def test_import_rlds_reverb_has_no_side_effects_beyond_names(subprocess_env):
    code = (
        'import sys\n'
        'finders = list(sys.meta_path); hooks = list(sys.path_hooks)\n'
        'import rlds_reverb\n'
        'assert sys.meta_path == finders and sys.path_hooks == hooks\n'
        'import importlib.util\n'
        "assert importlib.util.find_spec('rlds_reverb.writers') is None\n"
        "assert importlib.util.find_spec('rlds_reverb.items') is None\n"
        "print('ok')"
    )
    out = subprocess.run(
        [sys.executable, '-c', code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == 'ok'


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


_SHIM_CALLS = ('make_moved_getattr', 'warn_renamed_argument', 'install_moved_module_finder')


def test_no_deprecated_path_or_argument_remains():
    assert rlds_reverb.__version__ >= '0.3'
    assert not (_ROOT / 'rlds_reverb' / 'core' / 'deprecation.py').exists()
    found = []
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(_SHIM_CALLS):
                found.append(f'{_module_name(path)}:{node.lineno}')
            text = ast.unparse(node) if isinstance(node, ast.Call) else ''
            if text.startswith('warnings.warn(') and 'DeprecationWarning' in text:
                found.append(f'{_module_name(path)}:{node.lineno} DeprecationWarning')
    assert found == []
