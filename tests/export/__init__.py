"""Tests of `rlds_reverb.export`: Reverb tables back to RLDS, recording TF-Agents drivers."""
