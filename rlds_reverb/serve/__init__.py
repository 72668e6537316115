"""Reverb servers: table presets and lookups, starting and restoring servers, checkpoints."""
