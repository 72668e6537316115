"""Tests of `rlds_reverb.transform`: the two-step converter (the TF-Agents drop-in)."""
