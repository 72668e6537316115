"""RLDS data in: open datasets (TFDS directory, TFDS name, `tf.data`), validate, describe.

Also the embedded CartPole dataset, synthetic benchmark data, and the TFDS writer they use.
"""
