"""The HTML page of a dataset report (one self-contained file: inline CSS, PNG data URIs).

`write_report` checks that the page can be written, gathers the figures in one pass
(`report.compute_report`) and writes the page (`save_report`), atomically.

Plots and frames are PNG images inside the page (`report_images`). Every text taken from
the data (field names, string values, problem hints) is HTML-escaped. The key figures carry a
`data-figure` attribute (`episodes`, `steps`, `terminated`, `truncated`, `mean-return`, ...)
and show the values `rlds-reverb info` prints, formatted alike.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb.check import report as report_lib
from rlds_reverb.check import statistics_text
from rlds_reverb.check.report import DatasetReport, FieldSummary, FrameSample
from rlds_reverb.check.report_images import (
    MAX_ACTION_DIMS,
    escape_html,
    frame_uri,
    img,
    plot_action,
    plot_histogram,
)
from rlds_reverb.core import files, types

__all__ = ['check_output_path', 'render_html', 'save_report', 'write_report']

# Problems listed in the validation table before "and N more".
MAX_PROBLEM_ROWS = 200
# Longest string sample shown, in characters.
MAX_SAMPLE_CHARS = 200
# Dimensions of a field shown in its statistics table before "and N more".
MAX_STATISTICS_DIMS = 64
_FRAME_WIDTH_PX = 96

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto;
  max-width: 1100px; padding: 0 1em; color: #222; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin-bottom: 0.3em; }
.subtitle { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figures { display: flex; flex-wrap: wrap; gap: 0.6em; margin: 0.8em 0; }
.figure { border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 0.9em; min-width: 7em; }
.figure .label { color: #666; font-size: 0.85em; }
.figure .value { font-size: 1.4em; font-weight: 600; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plots img { max-width: 100%; border: 1px solid #eee; }
.ok { color: #1d7a33; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
.strip { display: flex; flex-wrap: wrap; gap: 0.8em; margin-bottom: 0.8em; }
.frames { text-align: center; font-size: 0.8em; color: #555; }
.frames img { width: FRAME_WIDTHpx; image-rendering: pixelated; border: 1px solid #ccc; margin: 0 1px; }
code, .sample { font-family: ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace;
  font-size: 0.9em; }
.note { color: #666; font-size: 0.9em; }
""".replace('FRAME_WIDTH', str(_FRAME_WIDTH_PX))


def _number(value: float | None, integer: bool) -> str:
    if value is None:
        return '—'
    if integer and float(value).is_integer():
        return str(int(value))
    return f'{value:.6g}'


def _figure_box(key: str, label: str, value: object, shown: str | None = None) -> str:
    text = str(value) if shown is None else shown
    return (
        f'<div class="figure"><div class="label">{escape_html(label)}</div>'
        f'<div class="value" data-figure="{key}" data-value="{escape_html(value)}">'
        f'{escape_html(text)}</div></div>'
    )


def _key_figures(report: DatasetReport) -> str:
    stats = report.stats
    boxes = [
        _figure_box('episodes', 'episodes', stats.episodes),
        _figure_box('steps', 'steps', stats.steps),
        _figure_box('terminated', 'terminated', stats.terminated),
        _figure_box('truncated', 'truncated', stats.truncated),
    ]
    if stats.unfinished:
        boxes.append(_figure_box('unfinished', 'without is_last', stats.unfinished))
    if stats.episodes:
        # Formatted as `DatasetStats.format` (what `rlds-reverb info` prints).
        lengths, returns = stats.lengths, stats.returns
        boxes += [
            _figure_box('mean-length', 'mean length', lengths.mean(), f'{lengths.mean():.1f}'),
            _figure_box('min-length', 'min length', lengths.min()),
            _figure_box('max-length', 'max length', lengths.max()),
            _figure_box('mean-return', 'mean return', returns.mean(), f'{returns.mean():.3f}'),
            _figure_box('std-return', 'return std', returns.std(), f'{returns.std():.3f}'),
            _figure_box('min-return', 'min return', returns.min(), f'{returns.min():.3f}'),
            _figure_box('max-return', 'max return', returns.max(), f'{returns.max():.3f}'),
        ]
    return f'<div class="figures">{"".join(boxes)}</div>'


def _episodes_section(report: DatasetReport) -> str:
    stats = report.stats
    if not stats.episodes:
        return '<p class="note">No episodes.</p>'
    plots = [
        plot_histogram(stats.lengths.astype(np.float64), 'Episode length', 'steps'),
        plot_histogram(stats.returns, 'Episode return', 'return (sum of rewards)'),
    ]
    return f'<div class="plots">{"".join(plots)}</div>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    head = ''.join(f'<th>{escape_html(h)}</th>' for h in headers)
    body = []
    for row in rows:
        cells = ''.join(
            f'<td class="num">{cell}</td>' if i in numeric else f'<td>{cell}</td>'
            for i, cell in enumerate(row)
        )
        body.append(f'<tr>{cells}</tr>')
    return f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _shape_text(shape: tuple | None) -> str:
    if shape is None:
        return 'any'
    return '[' + ', '.join('?' if d is None else str(d) for d in shape) + ']'


def _fields_table(fields: Sequence[FieldSummary]) -> str:
    rows = []
    for field in fields:
        integer = field.dtype.startswith(('int', 'uint', 'bool'))
        if field.is_string:
            capped = '+' if field.distinct_capped else ''
            stats = [f'{field.distinct}{capped} distinct', '', '', '']
        else:
            stats = [
                _number(field.minimum, integer),
                _number(field.maximum, integer),
                _number(field.mean, False),
                str(field.nan_count),
            ]
        rows.append(
            [
                f'<code>{escape_html(field.name)}</code>',
                escape_html(field.dtype),
                escape_html(_shape_text(field.shape)),
                *(escape_html(s) for s in stats),
            ]
        )
    return _table(['field', 'dtype', 'shape', 'min', 'max', 'mean', 'NaN'], rows, {3, 4, 5, 6})


def _statistics_section(statistics) -> str:
    """A table per field: count, mean, std, min, quantiles, max per dimension, and notes."""
    parts = []
    for field in statistics.fields.values():
        columns = statistics_text.list_columns(field)
        rows = [
            [str(d), str(field.count[d])]
            + [escape_html(statistics_text.format_number(v[d])) for _, v in columns]
            for d in range(min(field.dims, MAX_STATISTICS_DIMS))
        ]
        notes = statistics_text.describe_notes(field)
        if field.dims > MAX_STATISTICS_DIMS:
            notes.append(f'the first {MAX_STATISTICS_DIMS} of {field.dims} dimensions shown')
        headers = ['dim', 'count', *(label for label, _ in columns)]
        parts.append(
            f'<h3><code>{escape_html(field.path)}</code> <span class="note">'
            f'{escape_html(field.dtype)}{escape_html(_shape_text(field.shape))}</span></h3>'
            + _table(headers, rows, set(range(len(headers))))
            + ''.join(f'<p class="note">{escape_html(n)}</p>' for n in notes)
        )
    if statistics.skipped:
        left = '; '.join(f'{path}: {why}' for path, why in statistics.skipped.items())
        parts.append(f'<p class="note">No statistics for {escape_html(left)}.</p>')
    return ''.join(parts) or '<p class="note">No numeric step field.</p>'


def _string_samples(fields: Sequence[FieldSummary]) -> str:
    parts = []
    for field in fields:
        if not field.is_string:
            continue
        samples = []
        for value in field.samples:
            shown = value if len(value) <= MAX_SAMPLE_CHARS else value[:MAX_SAMPLE_CHARS] + '…'
            samples.append(f'<li class="sample">{escape_html(repr(shown))}</li>')
        capped = '+' if field.distinct_capped else ''
        parts.append(
            f'<h3><code>{escape_html(field.name)}</code> '
            f'<span class="note">({field.distinct}{capped} distinct values; '
            f'the first {len(field.samples)} shown)</span></h3><ul>{"".join(samples)}</ul>'
        )
    return ''.join(parts)


def _validation_section(report: DatasetReport) -> str:
    found = report.validation
    verdict = (
        '<span class="ok">every episode is valid</span>'
        if found.ok
        else f'<span class="bad">{found.invalid} invalid episodes</span>'
    )
    counts = _table(
        [
            'episodes',
            'valid',
            'invalid',
            'terminated (valid)',
            'truncated (valid)',
            'steps (valid)',
        ],
        [
            [
                str(found.episodes),
                str(found.valid),
                str(found.invalid),
                str(found.terminated),
                str(found.truncated),
                str(found.steps),
            ]
        ],
        set(range(6)),
    )
    parts = [f'<p data-figure="validation">{verdict}</p>', counts]
    if found.problems:
        rows = []
        for problem in found.problems[:MAX_PROBLEM_ROWS]:
            where = ', '.join(str(s) for s in problem.steps[:5]) or str(problem.step)
            if len(problem.steps) > 5:
                where += f' and {len(problem.steps) - 5} more'
            rows.append(
                [
                    str(problem.episode),
                    escape_html(where),
                    f'<code>{escape_html(problem.field)}</code>',
                    escape_html(problem.rule.rule_id),
                    escape_html(problem.hint),
                ]
            )
        parts.append(_table(['episode', 'steps', 'field', 'rule', 'what to do'], rows, {0}))
        more = len(found.problems) - MAX_PROBLEM_ROWS
        if more > 0:
            parts.append(f'<p class="note">and {more} more problems (see rlds-reverb validate)</p>')
    if report.unreadable:
        parts.append(
            f'<p class="note">{len(report.unreadable)} episodes did not decode; the other '
            'figures leave them out.</p>'
        )
    return ''.join(parts)


def _frames_section(frames: Sequence[FrameSample]) -> str:
    parts = []
    for field in dict.fromkeys(f.field for f in frames):
        cells = []
        for sample in (f for f in frames if f.field == field):
            first = img(frame_uri(sample.first), f'{field}, episode {sample.episode}, first step')
            last = img(frame_uri(sample.last), f'{field}, episode {sample.episode}, last step')
            cells.append(
                f'<div class="frames">{first}{last}<br>episode {sample.episode}: '
                'first, last</div>'
            )
        parts.append(
            f'<h3><code>{escape_html(field)}</code></h3><div class="strip">{"".join(cells)}</div>'
        )
    return ''.join(parts)


def _section(title: str, anchor: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{escape_html(title)}</h2>{body}</section>'


def render_html(report: DatasetReport) -> str:
    """Returns the report as one self-contained HTML page.

    Args:
      report: What `report.compute_report` found.

    Returns:
      The page, as text (UTF-8 when written).
    """
    stats = report.stats
    sections = [
        _section('Key figures', 'figures', _key_figures(report)),
        _section('Episodes', 'episodes', _episodes_section(report)),
        _section('Step fields', 'fields', _fields_table(report.step_fields)),
    ]
    if report.actions and stats.steps:
        plots = ''.join(
            f'<h3><code>{escape_html(a.name)}</code></h3>'
            + plot_action(a)
            + (
                f'<p class="note">the first {MAX_ACTION_DIMS} of {len(a.dims)} dimensions</p>'
                if len(a.dims) > MAX_ACTION_DIMS
                else ''
            )
            for a in report.actions
            if a.dims and (a.categories is not None or a.histograms)
        )
        sections.append(_section('Actions', 'actions', plots))
    if report.statistics is not None:
        body = _statistics_section(report.statistics)
        sections.append(_section('Statistics', 'statistics', body))
    sections.append(_section('Validation', 'validation', _validation_section(report)))
    if report.frames:
        sections.append(_section('Frames', 'frames', _frames_section(report.frames)))
    if any(f.is_string for f in report.step_fields):
        sections.append(_section('Strings', 'strings', _string_samples(report.step_fields)))
    if report.metadata_fields:
        body = _fields_table(report.metadata_fields) + _string_samples(report.metadata_fields)
        sections.append(_section('Episode metadata', 'metadata', body))
    title = escape_html(report.title)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{title}</title><style>{_CSS}</style></head><body>'
        f'<h1>{title}</h1><p class="subtitle">RLDS dataset report by rlds-reverb</p>'
        + ''.join(sections)
        + '</body></html>\n'
    )


def check_output_path(path: os.PathLike | str) -> pathlib.Path:
    """Checks that a report can be written to `path` (before any data is read).

    Args:
      path: The HTML file to write.

    Returns:
      `path` as a `pathlib.Path`.

    Raises:
      OSError: If `path` is a directory, or its directory is missing or not writable; the
        message names the path and what to do.
    """
    path = pathlib.Path(path)
    handle, temporary = _open_temporary(path)
    os.close(handle)
    os.unlink(temporary)
    return path


def _open_temporary(path: pathlib.Path) -> tuple[int, str]:
    """Creates the report's temporary file next to `path`; names what is wrong if it cannot."""
    if path.is_dir():
        raise IsADirectoryError(
            f"Cannot write the report to '{path}': it is a directory. Give a file path "
            "(such as 'report.html')."
        )
    try:
        handle, temporary = files.create_temporary_beside(path)
    except OSError as error:
        reason = error.strerror or str(error)
        if path.parent.exists() and not path.parent.is_dir():
            reason = f"'{path.parent}' is not a directory"
        elif not path.parent.exists():
            reason = 'its directory does not exist'
        raise type(error)(
            f"Cannot write the report to '{path}': {reason}. Give a path in an existing "
            'directory you can write to.'
        ) from error
    return handle, temporary  # Private (0600) while the page is written.


def save_report(found: DatasetReport, path: os.PathLike | str) -> pathlib.Path:
    """Renders a report as one self-contained HTML page and writes it to `path`.

    The page is written to a temporary file beside `path` and renamed into place, so `path`
    never holds half a page.

    Args:
      found: What `compute_report` found.
      path: The HTML file to write (replaced if it exists).

    Returns:
      `path` as a `pathlib.Path`.

    Raises:
      OSError: If `path` cannot be written (see `check_output_path`).
    """
    path = pathlib.Path(path)
    handle, temporary = _open_temporary(path)
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as out:
            out.write(render_html(found))
        # Shared as any file the user writes, never world-writable (core/files.py).
        files.publish_file(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_report(
    episodes: tf.data.Dataset,
    path: os.PathLike | str,
    *,
    title: str = 'RLDS dataset',
    frame_episodes: int = 4,
    string_samples: int = 8,
    progress: types.EpisodeProgressFn | None = None,
) -> DatasetReport:
    """Writes one self-contained HTML page describing an RLDS dataset, in one pass over it.

    The page holds the key figures of `rlds-reverb info` (episodes, steps, endings, length
    and return), histograms of episode length and return, a table of the step fields (dtype,
    shape, min, max, mean, NaN count), the action distribution (bars for discrete actions,
    a histogram per dimension for continuous ones), a statistics table per numeric field
    (per dimension: count, mean, std, min, q01, q99, max; `compute_statistics`), the
    validation report, a strip of the first and last frames of a few episodes per image
    field, sample values of string fields and a summary of the episode metadata. Plots and
    frames are PNG images inside the page: it opens without a network. The page is written
    to a temporary file beside `path` and renamed into place, so `path` never holds half a
    report.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`), as `rlds_reverb.load` gives.
      path: The HTML file to write (replaced if it exists).
      title: The page's title.
      frame_episodes: Of how many episodes (the first ones) to show frames.
      string_samples: How many distinct values of each string field to show.
      progress: Optional `fn(episodes, steps)`, called after each episode.

    Returns:
      The `DatasetReport` the page shows.

    Raises:
      OSError: If `path` cannot be written (a directory, a missing or read-only directory);
        checked before the dataset is read.
      SourceError: If the dataset holds no RLDS steps.
      SpecMismatchError: If required step fields are missing or have the wrong dtype.
      ValueError: If `frame_episodes` or `string_samples` is not an integer >= 0.

    Example:
      >>> rlds_reverb.write_report(rlds_reverb.load(path), 'report.html')
    """
    path = check_output_path(path)
    found = report_lib.compute_report(
        episodes,
        title=title,
        frame_episodes=frame_episodes,
        string_samples=string_samples,
        progress=progress,
    )
    save_report(found, path)
    return found
