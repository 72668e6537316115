"""Executes every notebook in notebooks/ headless, as a user would run it."""

import os
import pathlib

import nbclient
import nbformat
import pytest

pytestmark = pytest.mark.slow  # Each notebook starts a kernel and runs end to end (13-65 s).

_NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / 'notebooks').glob('*.ipynb'))


@pytest.mark.parametrize('path', _NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv('MPLBACKEND', 'module://matplotlib_inline.backend_inline')
    monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', '3')
    # Notebooks write what they generate under this directory and run their quick versions.
    monkeypatch.setenv('RLDS_REVERB_NOTEBOOK_DIR', str(tmp_path))
    monkeypatch.setenv('RLDS_REVERB_QUICK', '1')
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=900,
        kernel_name='python3',
        resources={'metadata': {'path': str(tmp_path)}},
    )
    client.execute(env=dict(os.environ))
