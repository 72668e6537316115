"""Contract tests of `rlds_reverb.core.compat`: each private hook does what the package needs.

A library upgrade that renames or changes one of them fails here, by name, instead of
silently taking another path.
"""

from __future__ import annotations

import subprocess
import sys
import sys as _sys

import numpy as np
import pytest
import tensorflow as tf

from rlds_reverb.core import compat


class _Deferred(compat.DeferredDataset):
    def __init__(self):
        self.built = 0
        self._pipeline = None
        super().__init__()

    def _build_pipeline(self):
        if self._pipeline is None:
            self.built += 1
            self._pipeline = tf.data.Dataset.range(3)
        return self._pipeline

    def _built_inputs(self):
        return [] if self._pipeline is None else [self._pipeline]

    @property
    def element_spec(self):
        return tf.TensorSpec([], tf.int64)


def test_a_deferred_dataset_builds_its_pipeline_on_first_use_only():
    dataset = _Deferred()
    assert dataset.built == 0
    assert list(dataset.as_numpy_iterator()) == [0, 1, 2]
    assert list(dataset.map(lambda x: x * 2).as_numpy_iterator()) == [0, 2, 4]
    assert dataset.built == 1


def test_unbatch_spec_drops_the_leading_axis():
    spec = tf.TensorSpec([None, 4, 2], tf.float32)
    assert compat.unbatch_spec(spec) == tf.TensorSpec([4, 2], tf.float32)
    from_slices = tf.data.Dataset.from_tensor_slices(tf.zeros([3, 4, 2])).element_spec
    assert compat.unbatch_spec(tf.TensorSpec([3, 4, 2], tf.float32)) == from_slices


def test_unbatch_dense_equals_unbatch():
    batches = tf.data.Dataset.from_tensor_slices(
        {'a': np.arange(12).reshape(3, 2, 2), 'b': np.arange(6.0).reshape(3, 2)}
    )
    ours = list(compat.unbatch_dense(batches).as_numpy_iterator())
    theirs = list(batches.unbatch().as_numpy_iterator())
    assert len(ours) == len(theirs) == 6
    for x, y in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(x['a'], y['a'])
        np.testing.assert_array_equal(x['b'], y['b'])


def test_map_single_threaded_equals_map_and_runs_ops_in_turn():
    numbers = tf.data.Dataset.range(20)

    def _fn(x):
        return {'square': x * x, 'sum': tf.reduce_sum(tf.range(x))}

    ours = compat.map_single_threaded(numbers, _fn, num_parallel_calls=4, deterministic=True)
    assert ours.element_spec == numbers.map(_fn).element_spec
    assert list(ours.as_numpy_iterator()) == list(numbers.map(_fn).as_numpy_iterator())

    @tf.function
    def _attribute():
        mapped = compat.map_single_threaded(numbers, _fn, num_parallel_calls=2, deterministic=True)
        op = mapped._variant_tensor.op  # noqa: SLF001
        assert op.type == 'ParallelMapDatasetV2'
        assert op.get_attr('use_inter_op_parallelism') is False
        assert op.get_attr('deterministic') == b'true'
        return 0

    _attribute()


@pytest.fixture
def record_file(tmp_path):
    path = str(tmp_path / 'records.tfrecord')
    with tf.io.TFRecordWriter(path) as writer:
        for record in (b'a', b'bb', b''):
            writer.write(record)
    return path


def test_read_tfrecord_file_reads_one_file(record_file):
    assert list(compat.read_tfrecord_file(record_file).as_numpy_iterator()) == [b'a', b'bb', b'']


def test_iter_tfrecord_file_reads_and_verifies(record_file, tmp_path):
    assert list(compat.iter_tfrecord_file(record_file)) == [b'a', b'bb', b'']
    corrupt = tmp_path / 'corrupt.tfrecord'
    data = bytearray(open(record_file, 'rb').read())  # noqa: SIM115
    data[12] ^= 0xFF  # The first record's data byte.
    corrupt.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(compat.iter_tfrecord_file(str(corrupt)))


def test_decode_structure_proto_reads_what_tensorflow_encodes():
    spec = {'a': tf.TensorSpec([2], tf.float32, name='a'), 'b': tf.TensorSpec([], tf.string)}
    proto = tf.__internal__.saved_model.encode_structure(spec)
    assert compat.decode_structure_proto(proto) == spec


def test_make_example_parser_parses_tfds_serialized_info():
    import tensorflow_datasets as tfds

    features = tfds.features.FeaturesDict({'x': tfds.features.Tensor(shape=(2,), dtype=np.int64)})
    record = features.serialize_example({'x': np.array([3, 4])})
    parser = compat.make_example_parser(features.get_serialized_info())
    assert parser.flat_feature_specs
    np.testing.assert_array_equal(parser.parse_example(tf.constant(record))['x'], [3, 4])


def test_reverb_checkpoint_protos_hold_the_messages_used():
    checkpoint_pb2, schema_pb2 = compat.reverb_checkpoint_protos()
    table = checkpoint_pb2.PriorityTableCheckpoint()
    used = ('table_name', 'max_size', 'max_times_sampled', 'signature', 'rate_limiter')
    for field in (*used, 'sampler', 'remover'):
        assert field in table.DESCRIPTOR.fields_by_name, field
    limiter = checkpoint_pb2.RateLimiterCheckpoint.DESCRIPTOR.fields_by_name
    assert {'insert_count', 'sample_count'} <= set(limiter)
    assert 'chunk_key' in schema_pb2.ChunkData.DESCRIPTOR.fields_by_name
    assert 'flat_trajectory' in schema_pb2.PrioritizedItem.DESCRIPTOR.fields_by_name


def test_make_fn_api_runner_builds_beams_runner():
    pytest.importorskip('apache_beam')
    from apache_beam.options.pipeline_options import PipelineOptions

    runner = compat.make_fn_api_runner(PipelineOptions(['--direct_num_workers=1']))
    assert type(runner).__name__ == 'FnApiRunner'


def test_stop_resource_tracker_ends_the_tracker_process():
    code = (
        'import multiprocessing as mp\n'
        'from multiprocessing import resource_tracker\n'
        'from rlds_reverb.core import compat\n'
        'resource_tracker.ensure_running()\n'
        'pid = resource_tracker._resource_tracker._pid\n'
        'assert pid\n'
        'compat.stop_resource_tracker()\n'
        'import os\n'
        'try:\n'
        '    os.kill(pid, 0)\n'
        '    print("alive")\n'
        'except ProcessLookupError:\n'
        '    print("stopped")\n'
    )
    out = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == 'stopped', out.stderr


def test_keep_alive_forever_adds_a_reference():
    value = object()
    before = _sys.getrefcount(value)
    compat.keep_alive_forever(value)
    assert _sys.getrefcount(value) == before + 1


def _record_status_conversions(call) -> list[str]:
    """Returns the names of the calls made inside the conversion of a failed op's status."""
    seen = []

    def profile(frame, event, arg):
        if event == 'call' and compat.is_converting_tf_status(frame):
            seen.append(frame.f_code.co_qualname)

    _sys.setprofile(profile)
    try:
        call()
    finally:
        _sys.setprofile(None)
    return seen


def test_a_failed_op_status_becomes_an_exception_in_a_recognized_constructor():
    """An iterator's end, eagerly and in a function, is a failed op pybind11 converts."""

    def end_eagerly():
        with pytest.raises(StopIteration):
            next(iter(tf.data.Dataset.range(0)))

    iterator = iter(tf.data.Dataset.range(0))
    step = tf.function(lambda: next(iterator))

    def end_in_a_function():
        with pytest.raises(tf.errors.OutOfRangeError):
            step()

    assert '_NotOkStatusException.__init__' in _record_status_conversions(end_eagerly)
    assert 'OutOfRangeError.__init__' in _record_status_conversions(end_in_a_function)
    assert not compat.is_converting_tf_status(_sys._getframe())  # noqa: SLF001
    assert not compat.is_converting_tf_status(None)


def test_tensor_to_numpy_gives_what_as_numpy_iterator_gives():
    element = {
        'frames': tf.constant([b'\x00a', b'b\x00']),
        'x': tf.range(3),
        's': tf.constant(b'z'),
    }
    want = next(tf.data.Dataset.from_tensors(element).as_numpy_iterator())
    got = {k: compat.tensor_to_numpy(v) for k, v in element.items()}
    assert got['s'] == want['s'] == b'z'
    for key in ('frames', 'x'):
        np.testing.assert_array_equal(got[key], want[key])
        assert got[key].dtype == want[key].dtype and not got[key].flags.writeable
