"""Tests of `rlds_reverb.distribute`: the Beam pipeline into several servers."""
