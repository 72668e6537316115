"""A learner process that trains until it is interrupted: run by tests/learn/test_stopping.py.

    python tests/learn/blocked_learner.py ADDRESS TABLE {dataset,function}

Samples batches of 64 single-step items (observation float32[3]) from TABLE: `dataset`
iterates `learner.as_dataset()` in Python, `function` calls a `tf.function` train step on
an iterator of it (as `rlds_reverb.examples.cql_dqn` does). Prints `ready` once the
learner is built and `batch` after each batch, and lets a `KeyboardInterrupt` end it as a
user's program would.
"""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import tensorflow as tf  # noqa: E402

import rlds_reverb  # noqa: E402

SPEC = {'observation': tf.TensorSpec([3], tf.float32)}


def main() -> None:
    address, table, mode = sys.argv[1:4]
    learner = rlds_reverb.LearnerDataset(
        address, table, data_spec=SPEC, sequence_length=None, batch_size=64
    )
    print('ready', flush=True)
    if mode == 'dataset':
        for _ in learner.as_dataset():
            print('batch', flush=True)
    iterator = iter(learner.as_dataset())

    @tf.function
    def train_step(iterator) -> tf.Tensor:
        return tf.reduce_sum(next(iterator).weights)

    while True:
        train_step(iterator)
        print('batch', flush=True)


if __name__ == '__main__':
    main()
