"""The embedded default datasets."""
