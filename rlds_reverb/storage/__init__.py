"""RLDS on disk: the TFDS dataset writer and the TFDS features made from specs."""
