"""Fixtures shared by the corpus tests."""

import pytest

from tests.reliability import corpus


@pytest.fixture(scope='module')
def build(tmp_path_factory):
    """Builds each corpus variant once per test module, under a temporary directory."""
    return corpus.make_builder(tmp_path_factory.mktemp('corpus'))
