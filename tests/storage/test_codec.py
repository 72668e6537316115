"""The record codec against protobuf's parser and TensorFlow's own reader and writer.

Examples encoded here parse with `tf.train.Example.FromString` and
`tf.io.parse_single_example` to the same values; records framed here read with
`tf.data.TFRecordDataset` and TF1's checksum-verifying iterator; records TF writes read
here; and the edge cases: empty records and lists, large and negative int64 varints,
float32 NaN and infinities, bytes that are not UTF-8.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf

from rlds_reverb.storage import checksums, codec

_INT64 = np.iinfo(np.int64)
_EDGE_FEATURES = {
    'empty_float': np.zeros([0], np.float32),
    'empty_int': np.zeros([0], np.int64),
    'empty_bytes': np.array([], dtype=object),
    'small': np.array([0, 1, 127, 128, 16_383, 16_384], np.int64),
    'large': np.array([2**31, 2**40, 2**62, _INT64.max], np.int64),
    'negative': np.array([-1, -2, -(2**40), _INT64.min], np.int64),
    'flags': np.array([True, False, True]),
    'image': np.arange(256, dtype=np.uint8).reshape(16, 16),
    'specials': np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38], np.float32),
    'float64': np.array([0.1, 1e300], np.float64),  # Written as float32, as TFDS does.
    'strings': np.array([b'', b'\xff\xfe\x00', 'caf\u00e9'.encode(), b'x' * 300], dtype=object),
    'text': np.array(['instruction', ''], dtype=object),
}


def _expected(value: np.ndarray) -> list:
    """What protobuf holds for `value`: floats as float32, ints and bools as int64."""
    if value.dtype.kind == 'f':
        return value.astype(np.float32).ravel().tolist()
    if value.dtype.kind in 'biu':
        return value.astype(np.int64).ravel().tolist()
    return [v.encode() if isinstance(v, str) else bytes(v) for v in value.ravel()]


def _listed(feature: tf.train.Feature) -> list:
    kind = feature.WhichOneof('kind')
    return [] if kind is None else list(getattr(feature, kind).value)


def _assert_lists_equal(got, want) -> None:
    np.testing.assert_array_equal(np.asarray(got, dtype=object), np.asarray(want, dtype=object))


def test_examples_parse_with_protobuf():
    parsed = tf.train.Example.FromString(codec.encode_example(_EDGE_FEATURES))
    assert set(parsed.features.feature) == set(_EDGE_FEATURES)
    for name, value in _EDGE_FEATURES.items():
        got = _listed(parsed.features.feature[name])
        if value.dtype.kind == 'f':
            np.testing.assert_array_equal(np.float32(got), np.float32(_expected(value)))
        else:
            assert got == _expected(value), name


def test_examples_parse_with_tensorflow():
    record = codec.encode_example(_EDGE_FEATURES)
    specs = {}
    for name, value in _EDGE_FEATURES.items():
        dtype = {'f': tf.float32, 'b': tf.int64, 'i': tf.int64, 'u': tf.int64}.get(
            value.dtype.kind, tf.string
        )
        specs[name] = tf.io.FixedLenFeature([value.size], dtype)
    parsed = tf.io.parse_single_example(record, specs)
    for name, value in _EDGE_FEATURES.items():
        got = parsed[name].numpy()
        if value.dtype.kind == 'f':
            np.testing.assert_array_equal(got, value.astype(np.float32).ravel())
        else:
            assert got.tolist() == _expected(value), name


def test_examples_protobuf_writes_decode_here_packed_or_not():
    example = tf.train.Example()
    feature = example.features.feature
    feature['ints'].int64_list.value.extend([0, -1, 300, _INT64.max, _INT64.min])
    feature['floats'].float_list.value.extend([1.5, float('nan'), float('-inf')])
    feature['bytes'].bytes_list.value.extend([b'', b'\x80\xff'])
    feature['none'].float_list.SetInParent()
    record = example.SerializeToString()
    kinds = (codec.KIND_BYTES, codec.KIND_FLOAT, codec.KIND_INT64)
    decoded = codec.decode_example(record, kinds=kinds)
    assert decoded['ints'].tolist() == [0, -1, 300, _INT64.max, _INT64.min]
    np.testing.assert_array_equal(decoded['floats'], np.float32([1.5, np.nan, -np.inf]))
    assert decoded['bytes'].tolist() == [b'', b'\x80\xff']
    assert decoded['none'].size == 0
    # Unpacked repeated numbers (one field per value), as old writers wrote them.
    values = b'\x08\x01' + b'\x08' + b'\xff' * 9 + b'\x01' + b'\x08\x96\x01\x08\x00\x08\x02'
    int64_list = b'\x1a' + bytes([len(values)]) + values
    entry = b'\x0a\x01a' + b'\x12' + bytes([len(int64_list)]) + int64_list
    features = b'\x0a' + bytes([len(entry)]) + entry
    unpacked = b'\x0a' + bytes([len(features)]) + features
    parsed = tf.train.Example.FromString(unpacked).features.feature['a'].int64_list.value
    assert list(parsed) == [1, -1, 150, 0, 2]
    assert codec.decode_example(unpacked)['a'].tolist() == [1, -1, 150, 0, 2]


def test_decode_reads_back_what_encode_wrote():
    record = codec.encode_example(_EDGE_FEATURES)
    kinds = (codec.KIND_BYTES, codec.KIND_FLOAT, codec.KIND_INT64)
    decoded = codec.decode_example(record, kinds=kinds)
    for name, value in _EDGE_FEATURES.items():
        if value.size == 0:
            assert decoded.get(name, np.zeros(0)).size == 0, name
        elif value.dtype.kind == 'f':
            np.testing.assert_array_equal(decoded[name], value.astype(np.float32).ravel())
        else:
            assert decoded[name].tolist() == _expected(value), name
    assert set(codec.decode_example(record, frozenset({'small', 'strings'}))) == {'small'}


def test_an_empty_example_and_an_empty_record():
    empty = tf.train.Example(features=tf.train.Features())
    assert tf.train.Example.FromString(codec.encode_example({})) == empty
    assert codec.decode_example(b'') == {}


@pytest.mark.parametrize('record', [b'\x0a\x05\x0a', b'\x0a\x02\x0a\x09', b'\x0f', b'\xff'])
def test_a_record_that_is_not_an_example_is_an_error(record):
    with pytest.raises(ValueError, match='not a tf.train.Example'):
        codec.decode_example(record)


def test_unknown_dtypes_are_refused():
    with pytest.raises(TypeError, match='Cannot write a complex64 field'):
        codec.encode_feature(np.zeros(2, np.complex64))


# --- Framing -------------------------------------------------------------------------------

_RECORDS = [b'', b'a', b'\x00' * 511, os.urandom(512), os.urandom(70_000), b'\xff' * 3]


def test_crc32c_is_tensorflows(tmp_path):
    # The known check value of CRC32C, and every length TF frames: its writer's checksums.
    assert checksums.crc32c(b'123456789') == 0xE3069283
    assert checksums.crc32c(b'') == 0
    assert checksums.crc32c(b'123456789') != zlib.crc32(b'123456789')  # Not CRC-32.
    path = tmp_path / 'tf.tfrecord'
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in _RECORDS:
            writer.write(record)
    assert path.read_bytes() == b''.join(codec.frame_record(r) for r in _RECORDS)


@pytest.mark.parametrize('size', [0, 1, 255, 256, 511, 512, 513, 4095, 16_385, 1_000_003])
def test_crc32c_of_every_size_is_tensorflows(size, tmp_path):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / 'one.tfrecord'
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(data)
    assert path.read_bytes() == codec.frame_record(data)
    if size <= 4096:  # And a plain bit-at-a-time loop.
        register = 0xFFFFFFFF
        for byte in data:
            register ^= byte
            for _ in range(8):
                register = (register >> 1) ^ (0x82F63B78 if register & 1 else 0)
        assert checksums.crc32c(data) == register ^ 0xFFFFFFFF


@pytest.mark.parametrize('framing', ['numpy', 'writer'])
def test_records_written_here_read_with_tensorflow(tmp_path, framing):
    path = tmp_path / 'ours.tfrecord'
    if framing == 'numpy':  # Our checksums, verified by TF's readers.
        path.write_bytes(b''.join(codec.frame_record(record) for record in _RECORDS))
    else:
        with codec.RecordWriter(path) as writer:
            for record in _RECORDS:
                writer.write(record)
    assert list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator()) == _RECORDS
    assert list(codec.iter_records(path, verify=True)) == _RECORDS  # TF1's verifying reader.
    assert list(codec.iter_records(path)) == _RECORDS
    assert codec.scan_records(path) == codec.RecordScan(
        len(_RECORDS), path.stat().st_size, path.stat().st_size
    )


def test_records_tensorflow_wrote_read_here(tmp_path):
    path = tmp_path / 'tf.tfrecord'
    records = [codec.encode_example(_EDGE_FEATURES), b'', b'tail']
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert list(codec.iter_records(path)) == records
    assert list(codec.iter_records(path, verify=True)) == records


def test_a_corrupt_record_fails_the_verified_read_only(tmp_path):
    path = tmp_path / 'corrupt.tfrecord'
    with codec.RecordWriter(path) as writer:
        writer.write(b'payload' * 10)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # In the data: the framing still adds up.
    path.write_bytes(bytes(data))
    assert len(list(codec.iter_records(path))) == 1
    with pytest.raises(tf.errors.DataLossError):
        list(codec.iter_records(path, verify=True))


def test_a_cut_file_is_named_and_scanned(tmp_path):
    path = tmp_path / 'cut.tfrecord'
    with codec.RecordWriter(path) as writer:
        writer.write(b'first')
        writer.write(b'second record')
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])
    with pytest.raises(ValueError, match='ends inside a record'):
        list(codec.iter_records(path))
    scan = codec.scan_records(path)
    assert (scan.records, scan.end, scan.size) == (1, 5 + 16, len(whole) - 3)
    path.write_bytes(whole[: 5 + 16 + 7])
    with pytest.raises(ValueError, match='ends inside a record header'):
        list(codec.iter_records(path))


def test_the_codec_imports_without_tensorflow(subprocess_env):
    code = (
        'import sys\n'
        'from rlds_reverb.storage import codec\n'
        'from rlds_reverb.read import feature_classes, raw_records\n'
        'import numpy as np\n'
        "codec.decode_example(codec.encode_example({'x': np.arange(3)}))\n"
        "print(sorted(m for m in ('tensorflow', 'tensorflow_datasets') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, '-c', code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == '[]'
