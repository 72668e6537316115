"""Tests of `rlds_reverb.core`: specs, and the 0.1 import paths kept working.

`test_deprecation.py` is the only test module that uses the 0.1 paths and argument names.
"""
