"""Tests of `rlds_reverb.cli`: the `rlds-reverb` commands and their output."""
