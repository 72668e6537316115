"""Tests of `rlds_reverb.read`: opening RLDS datasets, whole-episode reading."""
