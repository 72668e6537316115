"""Dataset statistics as text: a table per field, as `rlds-reverb stats` prints them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Helpers of `rlds_reverb.check.statistics` (`DatasetStatistics.format`), which it imports:
# the statistics are typed `Any` here, so that the two modules do not import each other.
__all__: list[str] = []
FieldStatistics = Any
DatasetStatistics = Any

_WIDTH = 13  # -0.000325957 and a space.


def format_number(value: float) -> str:
    """Returns a figure as the tables show it (6 significant digits; '—' for NaN)."""
    if np.isnan(value):
        return '—'
    return f'{value:.6g}'


def format_quantile_label(level: float) -> str:
    """Returns a quantile's column label: `q01` for 0.01, `q99.5` for 0.995."""
    percent = f'{level * 100:.10g}'
    return f'q{percent.zfill(2)}' if '.' not in percent else f'q{percent}'


def list_columns(field: FieldStatistics) -> list[tuple[str, np.ndarray]]:
    """Returns the table's columns: (label, `[D]` values), in the order shown."""
    quantiles = [
        (format_quantile_label(level), field.quantiles[i])
        for i, level in enumerate(field.quantile_levels)
    ]
    low = [q for q, level in zip(quantiles, field.quantile_levels, strict=True) if level < 0.5]
    high = [q for q, level in zip(quantiles, field.quantile_levels, strict=True) if level >= 0.5]
    return [
        ('mean', field.mean),
        ('std', field.std),
        ('min', field.minimum),
        *low,
        *high,
        ('max', field.maximum),
    ]


def describe_dims(label: str, dims: Sequence[int]) -> str | None:
    """Returns `label: dims 0, 3` (None when there are none)."""
    if not dims:
        return None
    return f'{label}: dim{"s" if len(dims) > 1 else ""} {", ".join(map(str, dims))}'


def describe_notes(field: FieldStatistics) -> list[str]:
    """Returns the notes under a field's table: special dimensions and the quantiles' bound."""
    notes = [
        describe_dims('zero variance (left unchanged by normalization)', field.zero_variance_dims),
        describe_dims('NaN values (left out)', field.nan_dims),
        describe_dims('±inf values (left out)', field.inf_dims),
        describe_dims('no finite value', field.empty_dims),
    ]
    errors = field.quantile_rank_error[np.isfinite(field.quantile_rank_error)]
    if errors.size and errors.max() > 0:
        notes.append(f'quantiles: rank error at most {errors.max():.3%} of the count (sketch)')
    elif errors.size:
        notes.append('quantiles: exact')
    return [note for note in notes if note]


def _format_field(field: FieldStatistics) -> str:
    shape = '[' + ', '.join(map(str, field.shape)) + ']'
    counts = sorted(set(field.count.tolist()))
    counted = f'{counts[0]:,}' if len(counts) == 1 else f'{counts[0]:,} to {counts[-1]:,}'
    lines = [f'{field.path}  {field.dtype}{shape}  ({counted} values per dimension)']
    columns = list_columns(field)
    header = 'dim'.rjust(5) + ''.join(label.rjust(_WIDTH) for label, _ in columns)
    lines.append(header)
    for dim in range(field.dims):
        cells = ''.join(format_number(values[dim]).rjust(_WIDTH) for _, values in columns)
        lines.append(str(dim).rjust(5) + cells)
    lines += [f'  {note}' for note in describe_notes(field)]
    return '\n'.join(lines)


def format_statistics(statistics: DatasetStatistics) -> str:
    """Returns every field's table, then the fields left out."""
    parts = [f'{statistics.episodes:,} episodes, {statistics.steps:,} steps']
    parts += [_format_field(field) for field in statistics.fields.values()]
    if statistics.skipped:
        skipped = '\n'.join(f'  {path}: {why}' for path, why in statistics.skipped.items())
        parts.append(f'No statistics for:\n{skipped}')
    return '\n\n'.join(parts)
