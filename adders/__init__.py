"""Adders: n-step returns, GAE, sequences and frame stacking as tf.data transforms."""
