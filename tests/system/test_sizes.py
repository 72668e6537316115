"""Rooms that stay small: no module of `rlds_reverb/` or `adders/` over 500 lines, no function
body over 60 (docs/architecture.md; the project's guide).

A module's lines are all of its lines, docstrings included. A function's body runs from its
first statement after the docstring to its last line (its signature, decorators and docstring
left out; a nested function counts in its parent's body too).
"""

from __future__ import annotations

import ast
import configparser
import pathlib

_ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_BODY_LINES = 60


def _modules() -> list[pathlib.Path]:
    return sorted([*(_ROOT / 'rlds_reverb').rglob('*.py'), *(_ROOT / 'adders').rglob('*.py')])


def _count_body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Returns the lines of a function's body, its docstring left out."""
    body = function.body
    if ast.get_docstring(function, clean=False) is not None:
        body = body[1:]
    return function.end_lineno - body[0].lineno + 1 if body else 0


def _list_too_long() -> dict[str, int]:
    """Returns `path` (a module) or `path:function` of everything too long, with its lines."""
    found = {}
    for path in _modules():
        name = str(path.relative_to(_ROOT))
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = _count_body_lines(node)
                if body > MAX_BODY_LINES:
                    found[f'{name}:{node.name}'] = body
    return found


def test_no_module_or_function_body_is_too_long():
    too_long = _list_too_long()
    assert too_long == {}, (
        f'modules over {MAX_MODULE_LINES} lines or function bodies over {MAX_BODY_LINES} '
        '(split them along a seam)'
    )


def test_the_body_count_leaves_out_the_docstring_and_the_signature():
    source = '''
def f(
    a,
    b,
):
    """Doc.

    More doc.
    """
    x = a

    return x + b


def g():
    """Only a docstring."""
'''
    f, g = ast.parse(source).body
    assert _count_body_lines(f) == 3 and _count_body_lines(g) == 0


def test_the_type_check_covers_every_module():
    config = configparser.ConfigParser()
    config.read(_ROOT / 'mypy.ini')
    files = [f.strip() for f in config['mypy']['files'].split(',')]
    assert files == ['rlds_reverb', 'adders', 'tests/typing/public_api.py']
