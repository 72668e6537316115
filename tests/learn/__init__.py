"""Tests of `rlds_reverb.learn`: learner datasets, importance weights, priorities."""
