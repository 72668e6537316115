"""Only `tests/core/test_deprecation.py` uses the 0.1 module paths and argument names.

Everything else (the package, the other tests, the benchmarks, the notebooks) imports the
new modules and passes the new argument names, so the shims can go in 0.3 without touching
more than that one test module.
"""

from __future__ import annotations

import ast
import json
import pathlib

from rlds_reverb.core import deprecation

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_SHIM_TEST = _ROOT / 'tests' / 'core' / 'test_deprecation.py'
_SHIMS = _ROOT / 'rlds_reverb' / 'core' / 'deprecation.py'
_OLD_MODULES = set(deprecation.MOVED_MODULES)
# Function -> its 0.1 argument name (works until 0.3, with a warning).
_RENAMED_ARGUMENTS = {
    'validate': 'mode',
    'convert_rlds_to_trajectories': 'mode',
    'count_inserted': 'timeout_s',
}


def _sources() -> dict[str, str]:
    """Returns path -> Python source of every module and notebook code cell to check."""
    sources = {}
    for folder in ('rlds_reverb', 'adders', 'tests', 'benchmarks'):
        for path in (_ROOT / folder).rglob('*.py'):
            if path not in (_SHIM_TEST, _SHIMS):
                sources[str(path.relative_to(_ROOT))] = path.read_text()
    for path in (_ROOT / 'notebooks').glob('*.ipynb'):
        cells = json.loads(path.read_text())['cells']
        for index, cell in enumerate(cells):
            if cell['cell_type'] == 'code':
                code = ''.join(cell['source'])
                # IPython magics and shell lines are not Python.
                code = '\n'.join(
                    '' if line.lstrip().startswith(('%', '!')) else line
                    for line in code.splitlines()
                )
                sources[f'{path.relative_to(_ROOT)} cell {index}'] = code
    return sources


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f'{base}.{node.attr}'
    return None


def _old_uses(source: str) -> list[str]:
    """Returns the 0.1 module paths and argument names `source` uses, with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f'{node.module}.{alias.name}' for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node) or '']
        elif isinstance(node, ast.Call):
            function = (_dotted(node.func) or '').rpartition('.')[2]
            old = _RENAMED_ARGUMENTS.get(function)
            if old and any(keyword.arg == old for keyword in node.keywords):
                found.append(f'line {node.lineno}: {function}({old}=...)')
        found += [f'line {node.lineno}: {name}' for name in names if name in _OLD_MODULES]
    return found


def test_old_paths_and_arguments_only_in_the_deprecation_test():
    found = [f'{where} {use}' for where, source in _sources().items() for use in _old_uses(source)]
    assert not found, '\n'.join(found)


def test_the_check_finds_what_the_deprecation_test_uses():
    uses = _old_uses(_SHIM_TEST.read_text()) + _old_uses(
        'import rlds_reverb.writers\n'
        'from rlds_reverb import loading\n'
        'from rlds_reverb.server import start_server\n'
        'x = rlds_reverb.learner.train\n'
        'resume.count_inserted(client, table, timeout_s=1)\n'
    )
    assert any('validate(mode=...)' in use for use in uses)
    assert any('convert_rlds_to_trajectories(mode=...)' in use for use in uses)
    for old in ('rlds_reverb.writers', 'rlds_reverb.loading', 'rlds_reverb.server'):
        assert any(use.endswith(f': {old}') for use in uses), (old, uses)
    assert any(use.endswith(': rlds_reverb.learner') for use in uses)
    assert any('count_inserted(timeout_s=...)' in use for use in uses)
