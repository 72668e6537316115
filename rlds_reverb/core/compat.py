"""Every use of a private TensorFlow, TFDS, Reverb, Beam or CPython API, in one place.

The toolkit uses a few private hooks where the public API has no equivalent or costs
measurably more (each entry says which and why). They live here only, each resolved
directly (never behind a `getattr(..., None)` fallback), so that a library upgrade that
changes one fails loudly: at import, or in its contract test (`tests/core/test_compat.py`),
never by silently taking a slower or different path. TFDS, Reverb and Beam hooks are
imported when first used, so importing this module loads only TensorFlow.

Where a public API exists, the rest of the package uses it instead.
"""

from __future__ import annotations

import ctypes
import functools
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import map_op as _tf_map_op
from tensorflow.python.data.ops import readers as _tf_readers
from tensorflow.python.data.ops import unbatch_op as _tf_unbatch_op
from tensorflow.python.eager import core as _tf_eager_core
from tensorflow.python.lib.io import tf_record as _tf_record
from tensorflow.python.util import deprecation as _tf_deprecation

__all__ = [
    'DeferredDataset',
    'decode_structure_proto',
    'is_converting_tf_status',
    'iter_tfrecord_file',
    'keep_alive_forever',
    'make_example_parser',
    'make_fn_api_runner',
    'map_single_threaded',
    'read_tfrecord_file',
    'reverb_checkpoint_protos',
    'stop_resource_tracker',
    'tensor_to_numpy',
    'unbatch_dense',
    'unbatch_spec',
]

# --- TensorFlow: tf.data ---------------------------------------------------------------------


class DeferredDataset(tf.data.Dataset):
    """A `tf.data.Dataset` whose pipeline is built when first used, not when constructed.

    tf.data has no public way to defer building a dataset's graph: a `Dataset` subclass
    must hand its variant tensor to the constructor. This base passes none and serves the
    private `_variant_tensor` and `_inputs` from `_build_pipeline()`, called on first use
    (iteration, any transformation). `rlds_reverb.core.episodes.EpisodeDataset` builds on
    it, so that `load(...).take(n)` traces its decoding once, for the selection.

    Subclasses implement `_build_pipeline()` (returning the dataset whose elements this one
    yields), `_built_inputs()` (the datasets built so far) and `element_spec`.
    """

    def __init__(self):
        super().__init__(variant_tensor=None)

    def _build_pipeline(self) -> tf.data.Dataset:
        raise NotImplementedError

    def _built_inputs(self) -> list[tf.data.Dataset]:
        raise NotImplementedError

    @property
    def _variant_tensor(self):
        return self._build_pipeline()._variant_tensor  # noqa: SLF001

    def _inputs(self) -> list[tf.data.Dataset]:
        return self._built_inputs()


def tensor_to_numpy(tensor: tf.Tensor) -> Any:
    """Returns an eager tensor's value as `as_numpy_iterator` does: NumPy, arrays read-only.

    `EagerTensor._numpy()` shares the tensor's buffer where it can; the public `.numpy()`
    copies every array, which for an episode of decoded frames is megabytes a call
    (`check.validation.read_episodes` iterates episode plans with it).
    """
    value = tensor._numpy()
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    return value


def unbatch_spec(spec: tf.TypeSpec) -> tf.TypeSpec:
    """Returns the spec of one element of a batch of `spec` (`from_tensor_slices`' rule).

    The public way (`from_tensor_slices(...).element_spec`) traces ops; this reads the
    spec alone.
    """
    return spec._unbatch()  # noqa: SLF001


def unbatch_dense(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Returns `dataset.unbatch()` for datasets whose components are all dense tensors.

    `Dataset.unbatch` first maps every element through `normalize_to_dense`, a traced
    function and a stage per element, even when every component is dense already; the
    dataset class it then builds skips that map.
    """
    return _tf_unbatch_op._UnbatchDataset(dataset)  # noqa: SLF001


def map_single_threaded(
    dataset: tf.data.Dataset, fn, *, num_parallel_calls: int, deterministic: bool
) -> tf.data.Dataset:
    """Returns `dataset.map(fn, num_parallel_calls, deterministic)`, each call's ops run in turn.

    `Dataset.map` runs its function with TF's default executor, which may hand each op to
    another thread; the map dataset's `use_inter_op_parallelism=False` (what
    `sample_from_datasets` uses) runs a call's ops one after another on the thread of
    the call (TF's single-threaded executor; calls still run in parallel, and an op may
    still split its own work). For a function of many small ops on short episodes this
    costs less per call (chunks on 50-step episodes: about 11 µs of CPU an episode less,
    `benchmarks/README.md`). `fn` must hold no TF1 control flow (TF2 `tf.cond` is fine).
    """
    return _tf_map_op._ParallelMapDataset(  # noqa: SLF001
        dataset,
        fn,
        num_parallel_calls,
        deterministic,
        use_inter_op_parallelism=False,
        preserve_cardinality=True,
    )


def read_tfrecord_file(path: tf.Tensor | str) -> tf.data.Dataset:
    """Returns the records of one TFRecord file, without `TFRecordDataset`'s `flat_map`.

    `tf.data.TFRecordDataset` reads even one file through a `flat_map` over a dataset of
    file names (a traced function and two stages more, about 10 ms of set-up); the reader
    it wraps reads the one file itself.
    """
    return _tf_readers._TFRecordDataset(path)  # noqa: SLF001


def iter_tfrecord_file(path: str) -> Iterator[bytes]:
    """Yields the records of a TFRecord file eagerly, each checksum verified (TF's reader).

    TF1's `tf_record_iterator` is the one reader of record bytes that verifies the CRCs
    without building a `tf.data` pipeline (nothing traced); it warns once that it is TF1's.

    Raises:
      tf.errors.DataLossError: If the file is truncated or corrupt (while iterating).
      tf.errors.NotFoundError: If the file is missing.
    """
    with _tf_deprecation.silence():
        yield from _tf_record.tf_record_iterator(path)


def decode_structure_proto(proto: Any) -> Any:
    """Returns the nest of `TensorSpec`s a `StructuredValue` proto encodes.

    Reverb's checkpoints store each table's signature so (`reverb/server.py` encodes it
    with the same TensorFlow coder).
    """
    from tensorflow.python.saved_model import nested_structure_coder

    return nested_structure_coder.decode_proto(proto)


# --- TensorFlow: eager errors ----------------------------------------------------------------

# The exception TensorFlow's C++ raises for a failed op's status on its fast path.
_NOT_OK_STATUS = _tf_eager_core._NotOkStatusException  # noqa: SLF001


def is_converting_tf_status(frame: types.FrameType | None) -> bool:
    """Whether `frame` runs inside the constructor of TensorFlow's exception of a failed op.

    pybind11 calls that constructor (`_NotOkStatusException` on the eager fast path, a
    `tf.errors.OpError` subclass for a function call) while it turns a failed op's status,
    an iterator's end too, into a Python exception. An exception raised there, such as a
    signal handler's `KeyboardInterrupt`, does not propagate: pybind11 replaces it with a
    `RuntimeError` ("MISMATCH of original and normalized active exception types"). There
    is no public way to tell; `rlds_reverb.learn.stopping` puts a signal off until the
    conversion is done.
    """
    while frame is not None:
        if frame.f_code.co_name == '__init__' and isinstance(
            frame.f_locals.get('self'), _NOT_OK_STATUS | tf.errors.OpError
        ):
            return True
        frame = frame.f_back
    return False


# --- TFDS -------------------------------------------------------------------------------------


def make_example_parser(example_specs: Any) -> Any:
    """Returns TFDS' `ExampleParser` for serialized-feature info (`get_serialized_info()`).

    TFDS parses records with it in `as_dataset`, but has no public entry point that parses
    a record without building TFDS' whole reading pipeline.
    """
    from tensorflow_datasets.core import example_parser

    return example_parser.ExampleParser(example_specs)


# --- Reverb -----------------------------------------------------------------------------------


@functools.cache
def reverb_checkpoint_protos() -> tuple[Any, Any]:
    """Returns Reverb's `(checkpoint_pb2, schema_pb2)` modules: its checkpoint file format.

    Reverb reads and writes its checkpoints in C++ only; the toolkit reads their table
    records (status, export) and writes a drained copy (export), with these messages.
    """
    from reverb.cc import schema_pb2
    from reverb.cc.checkpointing import checkpoint_pb2

    return checkpoint_pb2, schema_pb2


# --- Apache Beam ------------------------------------------------------------------------------


def make_fn_api_runner(options: Any) -> Any:
    """Returns Beam's `FnApiRunner`, built as the DirectRunner builds it, for `options`.

    Beam 2.77's DirectRunner first tries its Prism runner, which downloads a binary on
    every run until cached; the FnApiRunner (its fallback, no network) is what the
    pipeline runs and is tested on. `direct_num_workers`, `direct_running_mode` and the
    other DirectRunner options apply.

    Args:
      options: The pipeline's `PipelineOptions`.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(
        provision_info=fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
    )


# --- CPython ----------------------------------------------------------------------------------


def stop_resource_tracker() -> None:
    """Stops `multiprocessing`'s resource tracker process, and waits for it to end.

    Spawning starts the tracker, which otherwise ends only after this process does: a
    caller watching for processes left behind would still see it. Python 3.11 has no
    public way to stop it.
    """
    from multiprocessing import resource_tracker

    # typeshed leaves the private `_stop` out of `ResourceTracker`.
    resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]  # noqa: SLF001


def keep_alive_forever(value: object) -> None:
    """Adds a reference to `value` that is never released: it is never destroyed.

    For a Reverb writer whose C++ destructor would wait forever on a dead server (see
    `rlds_reverb.write.engines.release_writer`): a small, bounded leak instead of a hang.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))
