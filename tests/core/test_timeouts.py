"""Every timeout default has one owner: `rlds_reverb.core.timeouts` (read from the source)."""

from __future__ import annotations

import ast
import pathlib

from rlds_reverb.core import timeouts

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_OWNER = _ROOT / 'rlds_reverb' / 'core' / 'timeouts.py'


def _is_number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _list_literal_timeouts(path: pathlib.Path) -> list[str]:
    """Timeout defaults written as numbers: argument defaults, constants, CLI defaults."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(zip(positional[::-1], arguments.defaults[::-1], strict=False))
            pairs += list(zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True))
            found += [
                f'{node.name}({arg.arg}={ast.unparse(default)})'
                for arg, default in pairs
                if 'timeout' in arg.arg and _is_number(default)
            ]
        elif isinstance(node, ast.Assign) and _is_number(node.value):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            found += [f'{n} = {ast.unparse(node.value)}' for n in names if 'TIMEOUT' in n]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith('add_argument'):
            flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
            default = next((k.value for k in node.keywords if k.arg == 'default'), None)
            if any('timeout' in str(flag) for flag in flags) and _is_number(default):
                found.append(f'{flags[0]} default={ast.unparse(default)}')
    return [f'{path.relative_to(_ROOT)}: {item}' for item in found]


def test_no_timeout_default_is_written_outside_its_owner():
    paths = [*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')]
    found = [item for path in paths if path != _OWNER for item in _list_literal_timeouts(path)]
    assert found == []


def test_the_check_finds_literal_defaults(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text(
        'X_TIMEOUT_MS = 5\n'
        'def f(*, timeout_ms=3): ...\n'
        "parser.add_argument('--timeout-ms', default=7)\n"
    )
    global _ROOT
    root, _ROOT = _ROOT, tmp_path
    try:
        assert _list_literal_timeouts(bad) == [
            'bad.py: X_TIMEOUT_MS = 5',
            'bad.py: f(timeout_ms=3)',
            'bad.py: --timeout-ms default=7',
        ]
    finally:
        _ROOT = root


def test_every_default_is_a_positive_number_of_milliseconds():
    for name in timeouts.__all__:
        value = getattr(timeouts, name)
        assert name.endswith('_MS') and isinstance(value, int) and value > 0, name
