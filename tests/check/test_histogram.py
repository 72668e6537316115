"""Exact streaming histograms (rlds_reverb.check.histogram): counts equal NumPy's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlds_reverb.check.histogram import StreamingHistogram


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32),
            min_size=0,
            max_size=20,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_streaming_histogram_counts_exactly(batches):
    histogram = StreamingHistogram(1, num_bins=16)
    for batch in batches:
        histogram.add(np.asarray(batch, np.float64).reshape(-1, 1))
    values = np.concatenate([np.asarray(b, np.float64) for b in batches])
    edges, counts = histogram.bins(0)
    assert histogram.total(0) == values.size == counts.sum()
    assert len(counts) <= 16
    if values.size:
        assert edges[0] <= values.min() and values.max() < edges[-1]
        np.testing.assert_array_equal(counts, np.histogram(values, edges)[0])


def test_streaming_histogram_skips_nan_and_infinity_per_dimension():
    histogram = StreamingHistogram(2, num_bins=8)
    histogram.add(np.array([[np.nan, 1.0], [np.inf, 2.0], [0.5, -np.inf]]))
    assert (histogram.total(0), histogram.total(1)) == (1, 2)
    assert histogram.bins(0)[1].tolist() == [1]
