"""Fixtures shared by the reliability tests."""

import pytest

from tests.reliability import corpus


@pytest.fixture(scope='session')
def build(tmp_path_factory):
    """Builds each corpus variant once per session, under a temporary directory."""
    return corpus.make_builder(tmp_path_factory.mktemp('corpus'))
