"""Reliability tests: malformed data, server faults, load, and priority updates."""
