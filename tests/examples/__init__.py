"""Tests of `rlds_reverb.examples`: the embedded datasets and the demo agent."""
