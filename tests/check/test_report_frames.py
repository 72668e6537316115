"""The report of a dataset read with its frames encoded: the first and last frames shown are
those of the decoded read, and frame bytes are not counted as strings."""

from __future__ import annotations

import numpy as np

import rlds_reverb
from rlds_reverb.check import report
from tests import robot_data as rd

EPISODES = 6


def test_encoded_frames_are_reported_as_the_frames_they_decode_to(robot_dir):
    encoded = report.compute_report(
        rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES), frame_episodes=2
    )
    decoded = report.compute_report(rlds_reverb.load(robot_dir).take(EPISODES), frame_episodes=2)
    assert [(f.field, f.episode) for f in encoded.frames] == [
        (f.field, f.episode) for f in decoded.frames
    ]
    assert len(encoded.frames) == 2 * len(rd.FRAME_PATHS)
    for got, want in zip(encoded.frames, decoded.frames, strict=True):
        np.testing.assert_array_equal(got.first, want.first)
        np.testing.assert_array_equal(got.last, want.last)
    fields = {f.name: f for f in encoded.step_fields}
    for path in rd.FRAME_PATHS:
        field = fields[path.replace('/', '.')]
        assert (field.dtype, field.shape) == ('uint8', tuple(encoded_shape(robot_dir, path)))
        assert not field.is_string and field.samples == [] and field.distinct is None
    assert fields['language_instruction'].is_string  # Other strings are still counted.
    assert encoded.stats.steps == decoded.stats.steps and encoded.validation.ok


def encoded_shape(directory, path):
    return rlds_reverb.list_frame_fields(directory)[path].shape


def test_the_report_command_reads_frames_encoded(robot_dir, tmp_path, run_cli):
    out = tmp_path / 'report.html'
    code, printed, err = run_cli(
        'report', robot_dir, '--split', 'train[:3]', '--encoded-frames', 'all',
        '--out', out, '--no-progress',
    )  # fmt: skip
    assert code == 0, err
    assert 'Wrote' in printed
    page = out.read_text()
    assert page.count('data:image/png;base64,') >= 2 * len(rd.FRAME_PATHS)
