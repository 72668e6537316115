"""Dataset statistics to and from JSON: one plain document, NaN written as null.

The document (`FORMAT`): `format`, `fingerprint` (or null), `data` (what the fingerprint
describes, for people), `options`, `episodes`, `steps`, `skipped` and `fields`, each field
holding `dtype`, `shape`, the `[D]` lists `count`, `mean`, `std`, `min`, `max`,
`nan_count`, `inf_count`, `quantile_rank_error`, `quantile_levels` and `quantiles` (one
`[D]` list per level), and, for people, `zero_variance_dims`, `nan_dims`, `inf_dims`,
`empty_dims`. JSON has no NaN: a NaN figure (a dimension without a finite value) is
written as null and read back as NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlds_reverb.check.statistics import DatasetStatistics, FieldStatistics, StatisticsOptions

# Helpers of `rlds_reverb.check.statistics_files`.
__all__: list[str] = []

FORMAT = 'rlds-reverb statistics 1'
_FLOATS = ('mean', 'std', 'min', 'max', 'quantile_rank_error')
_COUNTS = ('count', 'nan_count', 'inf_count')
_ATTRIBUTES = {'min': 'minimum', 'max': 'maximum'}


def _floats(values: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, np.float64).ravel()]


def options_to_json(options: StatisticsOptions) -> dict[str, Any]:
    """Returns the options as JSON values (part of the fingerprint)."""
    return {
        'fields': None if options.fields is None else list(options.fields),
        'quantiles': list(options.quantiles),
        'sketch_capacity': options.sketch_capacity,
    }


def _field_to_json(field: FieldStatistics) -> dict[str, Any]:
    found: dict[str, Any] = {'dtype': field.dtype, 'shape': list(field.shape)}
    for key in _COUNTS:
        found[key] = [int(v) for v in getattr(field, key)]
    for key in _FLOATS:
        found[key] = _floats(getattr(field, _ATTRIBUTES.get(key, key)))
    found['quantile_levels'] = list(field.quantile_levels)
    found['quantiles'] = [_floats(row) for row in field.quantiles]
    for key in ('zero_variance_dims', 'nan_dims', 'inf_dims', 'empty_dims'):
        found[key] = list(getattr(field, key))
    return found


def statistics_to_json(statistics: DatasetStatistics, *, data: Mapping | None) -> dict:
    """Returns the document of `statistics`; `data` describes what the fingerprint covers."""
    return {
        'format': FORMAT,
        'fingerprint': statistics.fingerprint,
        'data': data,
        'options': options_to_json(statistics.options),
        'episodes': statistics.episodes,
        'steps': statistics.steps,
        'skipped': dict(statistics.skipped),
        'fields': {path: _field_to_json(f) for path, f in statistics.fields.items()},
    }


def _read_floats(found: Mapping, key: str, dims: int) -> np.ndarray:
    values = found[key]
    if not isinstance(values, list) or len(values) != dims:
        raise ValueError(f'{key!r} must be a list of {dims} numbers')
    return np.array([np.nan if v is None else float(v) for v in values], np.float64)


def _read_counts(found: Mapping, key: str, dims: int) -> np.ndarray:
    values = found[key]
    if not isinstance(values, list) or len(values) != dims:
        raise ValueError(f'{key!r} must be a list of {dims} integers')
    return np.array([int(v) for v in values], np.int64)


def _field_from_json(path: str, found: Mapping) -> FieldStatistics:
    shape = tuple(int(d) for d in found['shape'])
    dims = int(np.prod(shape, dtype=np.int64))
    levels = tuple(float(q) for q in found['quantile_levels'])
    rows = found['quantiles']
    if not isinstance(rows, list) or len(rows) != len(levels):
        raise ValueError(f"'quantiles' must hold one list per level ({len(levels)})")
    return FieldStatistics(
        path=path,
        dtype=str(found['dtype']),
        shape=shape,
        count=_read_counts(found, 'count', dims),
        mean=_read_floats(found, 'mean', dims),
        std=_read_floats(found, 'std', dims),
        minimum=_read_floats(found, 'min', dims),
        maximum=_read_floats(found, 'max', dims),
        quantile_levels=levels,
        quantiles=np.stack([_read_floats({'q': r}, 'q', dims) for r in rows]).reshape(-1, dims),
        quantile_rank_error=_read_floats(found, 'quantile_rank_error', dims),
        nan_count=_read_counts(found, 'nan_count', dims),
        inf_count=_read_counts(found, 'inf_count', dims),
    )


def statistics_from_json(document: Any) -> DatasetStatistics:
    """Returns the statistics a document holds.

    Raises:
      ValueError: If the document is not statistics of this format; says what is wrong.
    """
    if not isinstance(document, dict) or document.get('format') != FORMAT:
        found = document.get('format') if isinstance(document, dict) else type(document).__name__
        raise ValueError(f'not rlds-reverb statistics (format {found!r}, expected {FORMAT!r})')
    try:
        options = StatisticsOptions(**document['options'])
        fields = {str(p): _field_from_json(str(p), f) for p, f in document['fields'].items()}
        return DatasetStatistics(
            fields=fields,
            skipped={str(k): str(v) for k, v in document['skipped'].items()},
            episodes=int(document['episodes']),
            steps=int(document['steps']),
            options=options,
            fingerprint=document['fingerprint'],
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f'malformed statistics ({type(e).__name__}: {e})') from e
