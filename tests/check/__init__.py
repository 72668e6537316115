"""Tests of `rlds_reverb.check`: validation rules, bulk record checks."""
