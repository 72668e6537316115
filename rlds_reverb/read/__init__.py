"""RLDS data in: open datasets (TFDS directory, TFDS name, `tf.data`) as whole episodes."""
