"""The report in a real browser: headless Chromium (Debian's package) opens the page.

Chromium is driven over the DevTools protocol (`tests/browser.py`); the page must load with
no console error or exception, every image (plots and frames) must decode, and the key
figures it shows must be the ones `rlds-reverb info` prints. A page with planted faults
checks that the harness sees each kind of error.
"""

from __future__ import annotations

import pathlib
import re
import shutil

import pytest
from PIL import Image

from tests import browser, users_data

pytestmark = pytest.mark.skipif(
    shutil.which(browser.CHROMIUM) is None,
    reason=f"{browser.CHROMIUM} is not on PATH; `make` installs Debian's chromium package "
    '(apt-get) for the browser tests',
)

# 16 episodes with image observations, string instructions and metadata (about 1 s).
_SPEC = users_data.users_spec(16, num_shards=2, max_drawn=40)


@pytest.fixture(scope='module')
def users_small(tmp_path_factory) -> pathlib.Path:
    return users_data.write(tmp_path_factory.mktemp('users_browser'), _SPEC)


@pytest.fixture
def chromium(tmp_path):
    profile = tmp_path / 'chromium-profile'
    profile.mkdir()
    opened = browser.Chromium(profile)
    try:
        yield opened
    finally:
        opened.close()


def _info_figures(text: str) -> dict[str, str]:
    """episodes, steps, terminated, truncated and mean return as `rlds-reverb info` prints them."""
    found = re.search(
        r'episodes: (\d+)\nsteps: (\d+)\nterminated: (\d+)  truncated: (\d+)\n.*'
        r'return: mean (\S+),',
        text,
        re.S,
    )
    assert found, text
    return dict(
        zip(
            ['episodes', 'steps', 'terminated', 'truncated', 'mean-return'],
            found.groups(),
            strict=True,
        )
    )


def test_the_report_loads_cleanly_and_shows_infos_figures(users_small, tmp_path, run_cli, chromium):
    out = tmp_path / 'report.html'
    code, _, err = run_cli('report', users_small, '--out', out, '--no-progress')
    assert code == 0, err
    chromium.open(out.as_uri())
    assert chromium.errors() == []
    images = chromium.evaluate(
        'Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])'
    )
    # Two episode histograms, one action plot, and two frames of each of four episodes.
    assert len(images) == 2 + 1 + 2 * 4
    assert [alt for alt, complete, width in images if not (complete and width > 0)] == []
    shown = chromium.evaluate(
        "Object.fromEntries(Array.from(document.querySelectorAll('[data-figure]'))"
        '.map(e => [e.dataset.figure, e.textContent]))'
    )
    code, info, _ = run_cli('info', users_small)
    assert code == 0
    expected = _info_figures(info)
    assert {key: shown[key] for key in expected} == expected
    assert int(expected['episodes']) == len(_SPEC.lengths)
    strings = chromium.evaluate("document.getElementById('strings').innerText")
    assert "'pick block 0'" in strings
    metadata = chromium.evaluate("document.getElementById('metadata').innerText")
    assert 'episode_metadata.agent' in metadata and "'agent-1'" in metadata


def test_the_harness_sees_exceptions_console_errors_and_broken_images(tmp_path, chromium):
    page = tmp_path / 'broken.html'
    page.write_text(
        '<!DOCTYPE html><html><body><img alt="gone" src="missing.png">'
        '<script>console.error("planted"); throw new Error("thrown");</script></body></html>'
    )
    chromium.open(page.as_uri())
    kinds = {event['method'] for event in chromium.errors()}
    assert kinds == {'Runtime.exceptionThrown', 'Runtime.consoleAPICalled', 'Log.entryAdded'}
    assert chromium.evaluate('document.images[0].naturalWidth') == 0


def test_the_screenshot_script_draws_the_page(cartpole_dir, tmp_path):
    out = tmp_path / 'report.png'
    browser.make_screenshot(out, data=cartpole_dir, width_px=800, max_height_px=1000)
    with Image.open(out) as image:
        assert image.format == 'PNG'
        assert image.size == (800, 1000)  # The page is taller than that.
