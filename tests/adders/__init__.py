"""Tests of the `adders` package: case tables, errors, NumPy and TF-Agents references."""
