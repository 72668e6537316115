"""The dataset report shows the statistics `compute_statistics` gives: a table per field."""

from __future__ import annotations

import html
import re

import numpy as np

import rlds_reverb
from rlds_reverb.check import report, report_html, statistics_text
from rlds_reverb.check.statistics import compute_statistics
from tests import builders


def _assert_same_statistics(found, expected) -> None:
    assert list(found.fields) == list(expected.fields) and found.skipped == expected.skipped
    for path, field in expected.fields.items():
        other = found[path]
        np.testing.assert_array_equal(other.count, field.count)
        np.testing.assert_array_equal(other.minimum, field.minimum)
        np.testing.assert_allclose(other.mean, field.mean, rtol=1e-12)
        np.testing.assert_allclose(other.std, field.std, rtol=1e-12)
        np.testing.assert_array_equal(other.quantiles, field.quantiles)


def test_the_report_computes_the_statistics_in_its_one_pass(users_dir):
    found = report.compute_report(rlds_reverb.load(users_dir))
    assert found.statistics is not None
    _assert_same_statistics(found.statistics, compute_statistics(rlds_reverb.load(users_dir)))


def test_the_page_shows_a_table_per_field(users_dir):
    found = report.compute_report(rlds_reverb.load(users_dir))
    page = report_html.render_html(found)
    section = page[page.index('<section id="statistics">') :]
    section = section[: section.index('</section>')]
    assert found.statistics is not None
    for path, field in found.statistics.fields.items():
        assert f'<h3><code>{path}</code>' in section
        cells = [
            statistics_text.format_number(field.get_quantile(0.99)[d]) for d in range(field.dims)
        ]
        for cell in cells:
            assert f'<td class="num">{html.escape(cell)}</td>' in section
    headers = re.findall(r'<th>([^<]*)</th>', section)
    assert headers[:8] == ['dim', 'count', 'mean', 'std', 'min', 'q01', 'q99', 'max']
    assert 'No statistics for language_instruction: not numeric (strings)' in section
    assert 'observation/image: an image' in html.unescape(section)


def test_special_dimensions_are_noted_on_the_page():
    observation = np.array([[1.0, np.nan, 2.0], [1.0, 3.0, 4.0]], np.float32)
    found = report.compute_report(builders.rlds([builders.episode(observation=observation)]))
    page = html.unescape(report_html.render_html(found))
    assert 'zero variance (left unchanged by normalization): dim 0' in page
    assert 'NaN values (left out): dim 1' in page
    assert 'quantiles: exact' in page
