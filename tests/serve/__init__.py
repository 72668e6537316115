"""Tests of `rlds_reverb.serve`: table presets, servers, seeding and checkpoints."""
