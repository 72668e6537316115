"""The images of a report page: plots drawn with matplotlib, frames encoded as PNG.

Plots are drawn with matplotlib's object API on its Agg canvas (no pyplot, no display, no
global state), with fixed margins; frames are encoded with Pillow. Every image becomes a
`data:` URI inside an `<img>` tag, so the page needs no other file.
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np

from rlds_reverb.check.report import ActionDistribution

# Helpers of report_html only: nothing here is public API.
__all__: list[str] = []

# Action dimensions plotted per field before "and N more".
MAX_ACTION_DIMS = 16
PLOT_COLOR = '#3a6ea5'
_DPI = 96


def escape_html(text: object) -> str:
    """Returns `text` (any object, as `str` gives it) escaped for HTML text and attributes."""
    return html.escape(str(text), quote=True)


def png_uri(data: bytes) -> str:
    """Returns PNG bytes as a `data:` URI."""
    return 'data:image/png;base64,' + base64.b64encode(data).decode('ascii')


def make_figure(width_in: float = 5.0, height_in: float = 3.0, *, rows: int = 1):
    """Returns a matplotlib figure on an Agg canvas, with fixed margins."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Fixed margins: matplotlib's automatic layouts take most of the drawing time.
    figure = Figure(figsize=(width_in, height_in), dpi=_DPI)
    margin_in = 0.45
    figure.subplots_adjust(
        left=0.75 / width_in,
        right=1 - 0.15 / width_in,
        bottom=margin_in / height_in,
        top=1 - 0.35 / height_in,
        hspace=0.6 if rows > 1 else 0.2,
        wspace=0.45,
    )
    FigureCanvasAgg(figure)
    return figure


def plot_uri(figure) -> str:
    """Returns the figure drawn as PNG, as a `data:` URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format='png', dpi=_DPI)
    return png_uri(buffer.getvalue())


def img(uri: str, alt: str, **attributes: str) -> str:
    """Returns an `<img>` tag of `uri`, its alt text and other attributes escaped."""
    extra = ''.join(f' {k}="{escape_html(v)}"' for k, v in attributes.items())
    return f'<img src="{uri}" alt="{escape_html(alt)}"{extra}>'


def plot_histogram(values: np.ndarray, title: str, xlabel: str) -> str:
    """Returns the `<img>` of a histogram of episodes' values (NaN and infinities left out)."""
    figure = make_figure()
    axes = figure.subplots()
    finite = values[np.isfinite(values)]
    if finite.size:
        counts, edges = np.histogram(finite, bins=min(50, len(np.unique(finite))))
        axes.stairs(counts, edges, fill=True, color=PLOT_COLOR)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel('episodes')
    return img(plot_uri(figure), title)


def plot_action(action: ActionDistribution) -> str:
    """Returns the `<img>` of an action field: bars of values, or a histogram per dimension."""
    shown = min(len(action.dims), MAX_ACTION_DIMS)
    columns = min(shown, 4)
    rows = -(-shown // columns)
    figure = make_figure(min(3.2 * columns, 12.8), 2.5 * rows, rows=rows)
    grid = np.atleast_1d(figure.subplots(rows, columns, squeeze=False).ravel())
    for dim, axes in enumerate(grid):
        if dim >= shown:
            axes.set_visible(False)
            continue
        if action.categories is not None:
            by_value = action.categories[dim]
            labels = [str(v) for v in by_value]
            axes.bar(labels, list(by_value.values()), color=PLOT_COLOR)
        else:
            edges, counts = action.histograms[dim]
            if len(counts):
                axes.stairs(counts, edges, fill=True, color=PLOT_COLOR)
        axes.set_title(action.dims[dim], fontsize=10)
        axes.set_ylabel('steps', fontsize=9)
        axes.tick_params(labelsize=8)
    kind = 'value counts' if action.discrete else 'histogram per dimension'
    return img(plot_uri(figure), f'{action.name}: {kind}')


def frame_uri(frame: np.ndarray) -> str:
    """Returns a uint8 `[H, W, C]` frame as a PNG `data:` URI."""
    from PIL import Image

    if frame.shape[-1] == 1:
        frame = frame[..., 0]
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buffer, format='PNG')
    return png_uri(buffer.getvalue())
