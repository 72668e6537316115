"""The package layout: every module imports only its own layer and the layers below, no cycles,
and docs/architecture.md lists every module.

Layers, bottom-up: `_LAYERS` below, the one place the order is written; docs/architecture.md
and the package docstring list the same order (checked here). Imports inside functions count
too: a lazy import is a dependency.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_LAYERS = (
    'core',
    'storage',
    'read',
    'check',
    'adders',
    'transform',
    'serve',
    'write',
    'distribute',
    'learn',
    'export',
    'examples',
    'cli',
)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(_ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _modules() -> dict[str, pathlib.Path]:
    paths = [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]
    return {_module_name(p): p for p in paths}


def _imports(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """Returns the package modules `path` imports (a `from pkg import name` of a submodule
    counts as that submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f'{node.module}.{alias.name}' for alias in node.names]
            # Names that are not submodules come from the package's `__init__`.
            attributes = [name for name in submodules if name not in modules]
            names = [name for name in submodules if name in modules]
            names += [node.module] if attributes else []
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition('.')[0]
            if name:
                found.add(name)
    return found


def _layer(module: str) -> int | None:
    parts = module.split('.')
    if parts[0] == 'adders':
        return _LAYERS.index('adders')
    if len(parts) > 1 and parts[1] in _LAYERS:
        return _LAYERS.index(parts[1])
    return None  # rlds_reverb itself and version.py: outside the layers.


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_every_module_imports_only_its_layer_and_below():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        if layer is None:
            continue
        for other in imported:
            other_layer = _layer(other)
            # A package imports its own modules, whatever their layer order.
            if other_layer is not None and other_layer > layer:
                wrong.append(
                    f'{module} ({_LAYERS[layer]}) imports {other} ({_LAYERS[other_layer]})'
                )
    assert not wrong, '\n'.join(wrong)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done.
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == 1:
                cycle = path[path.index(other) :] + [other]
                pytest.fail('import cycle: ' + ' -> '.join(cycle))
            if other not in state:
                visit(other)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_adders_build_on_core_only():
    outside = {
        f'{module} imports {other}'
        for module, imported in _graph().items()
        if module.startswith('adders')
        for other in imported
        if not (other.startswith('adders') or other.startswith('rlds_reverb.core'))
    }
    assert not outside, sorted(outside)


def test_apache_beam_is_imported_only_by_distribute():
    """Beam is an optional extra (`rlds-reverb[beam]`): only rlds_reverb.distribute imports it
    (and `core/compat.py`, inside the function that builds Beam's runner)."""
    outside = []
    for path in [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]:
        if 'distribute' in path.parts or path == _ROOT / 'rlds_reverb' / 'core' / 'compat.py':
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            outside += [f'{path.name}: {n}' for n in names if n.split('.')[0] == 'apache_beam']
    assert not outside, outside


def _listed_rooms(text: str, indent: str) -> list[str]:
    """Returns the room names listed one per line as `<indent>name/ ...` in `text`."""
    rooms = []
    for line in text.splitlines():
        if line.startswith(indent) and not line.startswith(indent + ' '):
            name = line[len(indent) :].split('/')[0]
            if name and '/' in line and name.isidentifier():
                rooms.append(name)
    return rooms


def test_architecture_page_and_package_docstring_list_the_layers_in_order():
    import rlds_reverb

    page = (_ROOT / 'docs' / 'architecture.md').read_text()
    architecture = page.split('```')[1]
    assert _listed_rooms(architecture, '  ') == list(_LAYERS)
    assert _listed_rooms(rlds_reverb.__doc__, '    ') == list(_LAYERS)


def test_architecture_page_lists_every_module_once():
    page = (_ROOT / 'docs' / 'architecture.md').read_text()
    listed = re.findall(r'^- `((?:rlds_reverb|adders)/[\w/]+\.py)`: \S', page, flags=re.MULTILINE)
    assert len(listed) == len(set(listed)), 'a module listed twice'
    actual = {
        str(path.relative_to(_ROOT))
        for path in [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]
        if path.name not in ('__init__.py', '__main__.py')
    }
    assert sorted(actual - set(listed)) == [], 'modules missing from docs/architecture.md'
    assert sorted(set(listed) - actual) == [], 'docs/architecture.md lists modules that are gone'


_PRIVATE_MODULES = (
    'tensorflow.python',
    'tensorflow_datasets.core.',
    'reverb.cc',
    'reverb.platform',
)
_PRIVATE_CALLS = ('ctypes.pythonapi', 'resource_tracker._', 'fn_runner.')


def test_private_apis_are_used_only_in_core_compat():
    found = []
    for path in [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]:
        if path == _ROOT / 'rlds_reverb' / 'core' / 'compat.py':
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f'{node.module}.{a.name}' for a in node.names)]
            found += [
                f'{path.relative_to(_ROOT)}: import {n}'
                for n in names
                if n.startswith(_PRIVATE_MODULES) or n.split('.')[0] == 'ctypes'
            ]
            if isinstance(node, ast.Attribute) and node.attr in ('_variant_tensor', '_unbatch'):
                found.append(f'{path.relative_to(_ROOT)}:{node.lineno} .{node.attr}')
        found += [f'{path.relative_to(_ROOT)}: {c}' for c in _PRIVATE_CALLS if c in text]
    assert found == []
