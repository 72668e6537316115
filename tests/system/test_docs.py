"""The docs site builds with warnings as errors, offline, and says when a docstring is missing.

`mkdocs build --strict` (mkdocs.yml) fails on a broken link or anchor, a page left out of the
nav, a docstring griffe cannot parse, and (docs/_hooks/missing_docstrings.py) a public
function, class or method without a docstring in a module an API page renders.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pathlib
import re
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_DOCS = _ROOT / 'docs'


def _build_site(site_dir: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(_ROOT), env.get('PYTHONPATH')]))
    return subprocess.run(
        [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', str(site_dir)],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope='module')
def site(tmp_path_factory) -> pathlib.Path:
    site_dir = tmp_path_factory.mktemp('site')
    built = _build_site(site_dir)
    assert built.returncode == 0, built.stdout + built.stderr
    assert 'WARNING' not in built.stderr, built.stderr
    return site_dir


def test_the_site_builds_strictly_with_every_page_and_the_api(site):
    assert (site / 'index.html').exists()
    for page in ('semantics', 'architecture', 'deviations', 'security', 'api/load'):
        assert (site / page / 'index.html').exists(), page
    api = (site / 'api' / 'load' / 'index.html').read_text()
    assert 'rlds_reverb.read.loading.load' in api and 'Raises' in api  # From the docstring.


def test_the_site_needs_no_network_for_fonts(site):
    pages = [p.read_text() for p in site.rglob('*.html')]
    assert pages and not any('fonts.googleapis.com' in page for page in pages)


def test_every_docs_page_is_in_the_nav():
    nav = (_ROOT / 'mkdocs.yml').read_text()
    pages = {p.relative_to(_DOCS).as_posix() for p in _DOCS.rglob('*.md')}
    listed = set(re.findall(r'([\w/-]+\.md)$', nav, flags=re.MULTILINE))
    assert pages == listed, (pages - listed, listed - pages)


def test_api_pages_cover_the_public_api():
    import rlds_reverb

    rendered = '\n'.join(p.read_text() for p in (_DOCS / 'api').glob('*.md'))
    modules = set(re.findall(r'^::: ([\w.]+)', rendered, flags=re.MULTILINE))
    for name in rlds_reverb.__all__:
        if name == '__version__':
            continue
        target = rlds_reverb._EXPORTS[name]
        module = target.partition(':')[0] if ':' in target else target
        assert module in modules, f'{name} ({module}) is on no API page'
    assert 'adders' in modules


def _load_extension():
    path = _DOCS / '_hooks' / 'missing_docstrings.py'
    spec = importlib.util.spec_from_file_location('missing_docstrings', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_public_function_without_a_docstring_is_a_warning(tmp_path, monkeypatch, caplog):
    import griffe

    package = tmp_path / 'toy'
    package.mkdir()
    (package / '__init__.py').write_text('"""Toy."""\n')
    (package / 'shown.py').write_text(
        '"""Shown."""\n__all__ = ["documented", "undocumented", "Base", "Child"]\n'
        'def documented():\n    """Has one."""\n'
        'def undocumented():\n    pass\n'
        'def _private():\n    pass\n'
        'class Base:\n    """Base."""\n    def run(self):\n        """Runs."""\n'
        'class Child(Base):\n    """Child."""\n    def __init__(self):\n        pass\n'
        '    def run(self):\n        pass\n'
        '    def extra(self):\n        pass\n'
    )
    (package / 'hidden.py').write_text('"""Not on an API page."""\ndef bare():\n    pass\n')
    extension = _load_extension()
    monkeypatch.setattr(extension, '_find_rendered_modules', lambda: {'toy.shown'})
    with caplog.at_level(logging.WARNING):
        griffe.load(
            'toy',
            search_paths=[str(tmp_path)],
            extensions=griffe.load_extensions(extension.MissingDocstrings()),
        )
    warned = sorted(re.findall(r'(toy\.[\w.]+) has no docstring', caplog.text))
    assert warned == ['toy.shown.Child.extra', 'toy.shown.undocumented']
