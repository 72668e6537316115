"""Tests of `rlds_reverb.write`: push into real Reverb servers, observers."""
