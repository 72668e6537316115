"""A griffe extension for the docs build: warns about public objects without a docstring.

mkdocstrings hides such objects (`show_if_no_docstring: false`) without a word; this
extension logs a warning for each instead, and `mkdocs build --strict` turns it into an
error, so an undocumented public function, class or method of a module that an API page
renders (`::: module` in docs/api/*.md) fails the build (tests/system/test_docs.py).
Special methods (`__init__` is documented by its class) and methods that implement a
documented method of a base class are exempt.
"""

from __future__ import annotations

import pathlib
import re

import griffe

__all__ = ['MissingDocstrings']

_KINDS = (griffe.Kind.MODULE, griffe.Kind.CLASS, griffe.Kind.FUNCTION)


_API_PAGES = pathlib.Path(__file__).resolve().parents[1] / 'api'


def _find_rendered_modules() -> set[str]:
    """Returns the modules the API pages render with `::: module`."""
    found = set()
    for page in _API_PAGES.glob('*.md'):
        found.update(re.findall(r'^::: ([\w.]+)', page.read_text(), flags=re.MULTILINE))
    return found


def _implements_documented_base(method: griffe.Object) -> bool:
    """Returns whether a base class of `method`'s class documents a method of its name."""
    cls = method.parent
    for base in getattr(cls, 'resolved_bases', ()):
        inherited = base.all_members.get(method.name)
        if inherited is not None and inherited.docstring:
            return True
    return False


def _is_documented_api(obj: griffe.Object) -> bool:
    """Returns whether `obj` is public all the way up (what the API pages render)."""
    while obj.parent is not None:
        if not obj.is_public or obj.is_alias:
            return False
        obj = obj.parent
    return True


def _is_exempt(obj: griffe.Object) -> bool:
    """Returns whether `obj` may go without a docstring of its own."""
    if obj.name.startswith('__') and obj.name.endswith('__'):
        return True
    return obj.parent.kind is griffe.Kind.CLASS and _implements_documented_base(obj)


def _warn_undocumented(obj: griffe.Object, rendered: set[str]) -> None:
    """Logs one warning per public class, function or method with no docstring."""
    for member in obj.members.values():
        if member.is_alias or member.kind not in _KINDS:
            continue
        if member.kind is griffe.Kind.MODULE:
            _warn_undocumented(member, rendered)
        elif member.module.path in rendered and _is_documented_api(member):
            if not member.docstring and not _is_exempt(member):
                griffe.logger.warning(
                    f'{member.relative_filepath}:{member.lineno}: {member.path} has no docstring'
                )
            _warn_undocumented(member, rendered)


class MissingDocstrings(griffe.Extension):
    """Warns, once the package is loaded, about each public object without a docstring."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        """Walks the loaded package."""
        _warn_undocumented(pkg, _find_rendered_modules())
