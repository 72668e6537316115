"""The malformed-data corpus: one builder per way RLDS data goes wrong.

Each `Variant` is one representation of one case: a `tf.data` RLDS dataset, or a real TFDS
directory written into a temporary directory (by `rlds_reverb.storage.tfds_writer`, then
damaged the way real data gets damaged). Every variant carries the facts that every path
(validate, convert, the CLI, push) must report:

* `faults`: the (episode, step, field, rule) of each broken validation rule, for data that
  opens but holds invalid episodes; `valid` lists the episodes that skip mode keeps;
* `failure`: the error type and message pattern (naming the file or field) for a source
  refused as a whole before any episode is read;
* `full_check`: what `load(..., check_files='full')` names (shard, record and field) for an
  episode record that does not decode.

Cases not representable in one form are absent in it: a TFDS feature fixes the rank and
dtype of a field for every episode, and a `tf.data` generator converts values to its
declared dtype itself (so a dtype mismatch only exists at the record level of a TFDS
directory).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.check.validation import Rule
from rlds_reverb.core import errors, types
from rlds_reverb.storage import tfds_writer
from tests import builders

TF_DATA = 'tf.data'
TFDS = 'tfds'
_NAME = 'corpus'

Source = tf.data.Dataset | pathlib.Path


@dataclasses.dataclass(frozen=True)
class Fault:
    """One broken rule: where, and which."""

    episode: int
    step: int
    field: str
    rule: str

    @property
    def pattern(self) -> str:
        """A regex for how `Problem.describe` and the converter's message name it.

        `Problem.describe` lists every bad step (`steps 1, 3`); the converter the first one.
        """
        return (
            rf'episode {self.episode}, steps? {self.step}(?:, \d+)*(?: and \d+ more)?, '
            rf'field {re.escape(self.field)}, rule {self.rule}'
        )


@dataclasses.dataclass(frozen=True)
class Failure:
    """A source refused as a whole: the error type and a regex its message matches."""

    error: type[Exception]
    match: str


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way data goes wrong, in one form, with the facts every path must report."""

    case: str
    form: str
    episodes: tuple[dict, ...]
    valid: tuple[int, ...] = ()
    faults: tuple[Fault, ...] = ()
    failure: Failure | None = None
    full_check: str | None = None
    read_error: str | None = None
    write: Callable[[pathlib.Path, Variant], Source] | None = None

    @property
    def id(self) -> str:
        return f'{self.case}-{self.form}'

    @property
    def invalid(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.episodes)) if i not in self.valid)

    def valid_episodes(self) -> list[dict]:
        """The episodes skip mode must let through, in order."""
        return [self.episodes[i] for i in self.valid]

    def build(self, root: pathlib.Path) -> Source:
        """Returns the `tf.data` dataset, or writes the TFDS directory under `root`."""
        return self.write(root / self.id, self)


def variant_id(variant: Variant) -> str:
    """The pytest id of a variant (`case-form`)."""
    return variant.id


def make_builder(root: pathlib.Path) -> Callable[[Variant], Source]:
    """Returns `build(variant)`, building each variant once under `root`."""
    built: dict[str, Source] = {}

    def _build(variant: Variant) -> Source:
        if variant.id not in built:
            built[variant.id] = variant.build(root)
        return built[variant.id]

    return _build


# --- Episodes ------------------------------------------------------------------------------


def _good(length: int, start: float = 0.0, *, ending: str = builders.TERMINATED) -> dict:
    return builders.episode(length, start=start, ending=ending)


def _with(episode: dict, **fields) -> dict:
    """Returns a copy of `episode` with some fields replaced (cast to their dtype)."""
    episode = dict(episode)
    for name, value in fields.items():
        dtype = episode[name].dtype if name in episode else None
        episode[name] = np.asarray(value, dtype)
    return episode


def _around(bad: dict, index: int = 1) -> tuple[dict, ...]:
    """Returns four episodes with `bad` at `index` and valid ones elsewhere."""
    good = [_good(3), _good(2, start=10.0), _good(5, start=20.0, ending=builders.TRUNCATED)]
    return tuple(good[:index] + [bad] + good[index:])


def _others(index: int, count: int = 4) -> tuple[int, ...]:
    return tuple(i for i in range(count) if i != index)


# --- Writers -------------------------------------------------------------------------------


def _features(**replaced) -> tfds.features.FeaturesDict:
    """The corpus' TFDS features; a replacement of None removes the field."""
    return builders.step_features(**replaced)


def _write_tfds(directory: pathlib.Path, episodes, features=None) -> pathlib.Path:
    """Writes one episode per shard, so that a damaged shard is one known episode."""
    return builders.write_tfds(
        directory, episodes, name=_NAME, features=features, episodes_per_shard=1
    )


def shard_of(dataset_dir: pathlib.Path, index: int) -> pathlib.Path:
    """Returns the shard file holding episode `index` (one episode per shard)."""
    return sorted(dataset_dir.glob(f'{_NAME}-train.tfrecord-*'))[index]


def shard_name(index: int, count: int = 4) -> str:
    """The file name of shard `index` of a corpus TFDS directory."""
    return f'{_NAME}-train.tfrecord-{index:05d}-of-{count:05d}'


def _replace_record(dataset_dir: pathlib.Path, index: int, steps: dict, features) -> None:
    """Rewrites episode `index`'s shard with a record serialized under other features."""
    record = tfds_writer.serialize_episode({types.STEPS: steps}, features.get_serialized_info())
    with tf.io.TFRecordWriter(os.fspath(shard_of(dataset_dir, index))) as writer:
        writer.write(record)


def _as_tf_data(_: pathlib.Path, variant: Variant) -> tf.data.Dataset:
    return builders.rlds(variant.episodes)


def _as_tfds(root: pathlib.Path, variant: Variant) -> pathlib.Path:
    return _write_tfds(root, variant.episodes)


def _as_generator(signature: dict) -> Callable[[pathlib.Path, Variant], tf.data.Dataset]:
    """A `tf.data` writer through `from_generator`, for per-episode shapes and structures."""

    def _write(_: pathlib.Path, variant: Variant) -> tf.data.Dataset:
        return builders.rlds_from_generator(variant.episodes, signature)

    return _write


def _as_unknown_rank_generator(_: pathlib.Path, variant: Variant) -> tf.data.Dataset:
    """A `tf.data` writer whose observation may have any rank (`TensorSpec(None)`)."""
    signature = builders.step_signature(**{types.OBSERVATION: tf.TensorSpec(None, tf.float32)})
    return builders.rlds_from_generator(variant.episodes, signature)


def _with_bad_record(bad_steps: dict, features, index: int = 1):
    """A TFDS writer: valid episodes, then episode `index`'s record replaced by `bad_steps`."""

    def _write(root: pathlib.Path, variant: Variant) -> pathlib.Path:
        directory = _write_tfds(root, variant.episodes)
        _replace_record(directory, index, bad_steps, features)
        return directory

    return _write


def _with_text_reward(root: pathlib.Path, variant: Variant) -> pathlib.Path:
    """Writes a TFDS directory whose rewards are text, with TFDS' own serializer."""
    features = _features(**{types.REWARD: tfds.features.Text()})
    directory = root / _NAME / '1.0.0'
    directory.mkdir(parents=True)
    info = tfds_writer._make_dataset_info(  # The writer's own metadata path.
        name=_NAME,
        version='1.0.0',
        directory=directory,
        features=features,
        description='',
        metadata=None,
    )
    records = [features.serialize_example({types.STEPS: s}) for s in variant.episodes]
    template = tfds.core.ShardedFileTemplate(
        data_dir=directory, dataset_name=_NAME, split='train', filetype_suffix='tfrecord'
    )
    lengths = []
    for index, record in enumerate(records):
        path = template.sharded_filepath(shard_index=index, num_shards=len(records))
        with tf.io.TFRecordWriter(str(path)) as writer:
            writer.write(record)
        lengths.append(1)
    split = tfds.core.SplitInfo(
        name='train',
        shard_lengths=lengths,
        num_bytes=sum(len(r) for r in records),
        filename_template=template,
    )
    info.set_splits(tfds.core.SplitDict([split]))
    info.write_to_directory(directory)
    return directory


def _without_reward_feature(root: pathlib.Path, variant: Variant) -> pathlib.Path:
    """A second TFDS directory written with a different feature set (no reward)."""
    episodes = [{k: v for k, v in e.items() if k != types.REWARD} for e in variant.episodes]
    return _write_tfds(root, episodes, _features(**{types.REWARD: None}))


def _truncated_shard(root: pathlib.Path, variant: Variant) -> pathlib.Path:
    directory = _write_tfds(root, variant.episodes)
    shard = shard_of(directory, 1)
    shard.write_bytes(shard.read_bytes()[:-7])
    return directory


def _without_dataset_info(root: pathlib.Path, variant: Variant) -> pathlib.Path:
    directory = _write_tfds(root, variant.episodes)
    (directory / 'dataset_info.json').unlink()
    return directory


# --- Cases ---------------------------------------------------------------------------------


def _flag_case(case: str, bad: dict, faults: tuple[Fault, ...], index: int = 1) -> list[Variant]:
    """A case in both forms: the same episodes as tf.data and as a TFDS directory."""
    episodes = _around(bad, index)
    common = dict(case=case, episodes=episodes, valid=_others(index), faults=faults)
    return [
        Variant(form=TF_DATA, write=_as_tf_data, **common),
        Variant(form=TFDS, write=_as_tfds, **common),
    ]


def _missing_field() -> list[Variant]:
    bad = _good(4, start=5.0)
    without = {k: v for k, v in bad.items() if k != types.REWARD}
    episodes = _around(bad)
    unreadable = (Fault(1, 0, types.STEPS, Rule.READABLE.rule_id),)
    return [
        # One record of a TFDS directory lacks the field (written under other features).
        Variant(
            case='missing_field',
            form=TFDS,
            episodes=episodes,
            valid=_others(1),
            faults=unreadable,
            full_check=rf"shard \S*{shard_name(1)}.*field 'reward' is missing",
            read_error='has a different number of steps than its',
            write=_with_bad_record(without, _features(**{types.REWARD: None})),
        ),
        # A generator yields one episode without the field.
        Variant(
            case='missing_field',
            form=TF_DATA,
            episodes=episodes[:1] + (without,) + episodes[2:],
            valid=_others(1),
            faults=unreadable,
            read_error='did not match the expected structure',
            write=_as_generator(builders.step_signature()),
        ),
        # A second TFDS directory written with a different feature set.
        Variant(
            case='missing_field_in_features',
            form=TFDS,
            episodes=episodes,
            failure=Failure(
                errors.SpecMismatchError, r"corpus/1.0.0: .*missing step field\(s\) \['reward'\]"
            ),
            write=_without_reward_feature,
        ),
    ]


def _inconsistent_shapes() -> list[Variant]:
    bad = _good(3, start=5.0)
    wide = dict(bad, **{types.OBSERVATION: np.arange(9, dtype=np.float32).reshape(3, 3)})
    episodes = _around(bad)
    variable = builders.step_signature(**{types.OBSERVATION: tf.TensorSpec([None], tf.float32)})
    return [
        Variant(
            case='inconsistent_shapes',
            form=TF_DATA,
            episodes=episodes[:1] + (wide,) + episodes[2:],
            valid=_others(1),
            faults=(Fault(1, 0, types.OBSERVATION, Rule.CONSISTENT_SHAPE.rule_id),),
            write=_as_generator(variable),
        ),
        Variant(
            case='inconsistent_shapes',
            form=TFDS,
            episodes=episodes,
            valid=_others(1),
            faults=(Fault(1, 0, types.OBSERVATION, Rule.READABLE.rule_id),),
            full_check=rf'shard \S*{shard_name(1)}.*does not parse.*steps/observation',
            read_error='Key: steps/observation',
            write=_with_bad_record(
                wide,
                _features(
                    **{types.OBSERVATION: tfds.features.Tensor(shape=(3,), dtype=np.float32)}
                ),
            ),
        ),
    ]


def _inconsistent_dtypes() -> list[Variant]:
    bad = _good(3, start=5.0)
    as_int = dict(bad, **{types.OBSERVATION: bad[types.OBSERVATION].astype(np.int64)})
    int_features = _features(
        **{types.OBSERVATION: tfds.features.Tensor(shape=(2,), dtype=np.int64)}
    )
    return [
        Variant(
            case='inconsistent_dtypes',
            form=TFDS,
            episodes=_around(bad, 2),
            valid=_others(2),
            faults=(Fault(2, 0, types.OBSERVATION, Rule.READABLE.rule_id),),
            full_check=rf"shard \S*{shard_name(2)}.*Key: steps/observation.*Data types don't match",
            read_error="Key: steps/observation.  Data types don't match",
            write=_with_bad_record(as_int, int_features, index=2),
        )
    ]


def _wrong_rank() -> list[Variant]:
    bad = _good(3, start=5.0)
    deeper = dict(bad, **{types.OBSERVATION: bad[types.OBSERVATION].reshape(3, 2, 1)})
    return [
        Variant(
            case='wrong_observation_rank',
            form=TF_DATA,
            episodes=_around(deeper),
            valid=_others(1),
            faults=(Fault(1, 0, types.OBSERVATION, Rule.CONSISTENT_SHAPE.rule_id),),
            write=_as_unknown_rank_generator,
        )
    ]


def _string_fields() -> list[Variant]:
    text = [
        dict(e, **{types.REWARD: np.array([str(r).encode() for r in e[types.REWARD]])})
        for e in _around(_good(3))
    ]
    failure = Failure(errors.SpecMismatchError, r"Step field 'reward' has dtype string")
    return [
        Variant(
            case='string_reward',
            form=TF_DATA,
            episodes=tuple(text),
            failure=failure,
            write=_as_tf_data,
        ),
        Variant(
            case='string_reward',
            form=TFDS,
            episodes=tuple(text),
            failure=failure,
            write=_with_text_reward,
        ),
    ]


def _file_cases() -> list[Variant]:
    episodes = _around(_good(4, start=5.0))
    return [
        Variant(
            case='truncated_shard',
            form=TFDS,
            episodes=episodes,
            failure=Failure(
                errors.SourceError, rf'shard \S*{shard_name(1)} .*is truncated or corrupt'
            ),
            write=_truncated_shard,
        ),
        Variant(
            case='no_dataset_info',
            form=TFDS,
            episodes=episodes,
            failure=Failure(
                errors.SourceError,
                r'corpus/1.0.0 is not an RLDS dataset directory.*found .*features.json',
            ),
            write=_without_dataset_info,
        ),
    ]


def _fault(episode: int, step: int, field: str, rule: Rule) -> tuple[Fault]:
    return (Fault(episode, step, field, rule.rule_id),)


def _rule_cases() -> list[Variant]:
    """Cases in both forms: the same damaged episodes as tf.data and as a TFDS directory."""
    first, last, terminal = types.IS_FIRST, types.IS_LAST, types.IS_TERMINAL
    base = _good(4, start=5.0)
    non_terminal = _good(4, start=5.0, ending=builders.TRUNCATED)
    cases = [
        ('empty_episode', _good(0), _fault(1, 0, types.STEPS, Rule.NON_EMPTY)),
        (
            'is_first_missing',
            _with(base, **{first: [0, 0, 0, 0]}),
            _fault(1, 0, first, Rule.FIRST_AT_START),
        ),
        (
            'is_first_repeated',
            _with(base, **{first: [1, 1, 0, 0]}),
            _fault(1, 1, first, Rule.FIRST_ONLY_AT_START),
        ),
        (
            'is_first_in_the_middle',
            _with(base, **{first: [0, 0, 1, 0]}),
            _fault(1, 0, first, Rule.FIRST_AT_START)
            + _fault(1, 2, first, Rule.FIRST_ONLY_AT_START),
        ),
        (
            'is_last_missing',
            _with(non_terminal, **{last: [0, 0, 0, 0]}),
            _fault(1, 3, last, Rule.LAST_AT_END),
        ),
        (
            'is_last_mid_episode',
            _with(base, **{last: [0, 1, 0, 1]}),
            _fault(1, 1, last, Rule.LAST_ONLY_AT_END),
        ),
        (
            'is_terminal_without_is_last',
            _with(base, **{terminal: [0, 0, 1, 1]}),
            _fault(1, 2, terminal, Rule.TERMINAL_IMPLIES_LAST),
        ),
        (
            'nan_reward',
            _with(base, reward=[0.0, 1.0, np.nan, 0.0]),
            _fault(1, 2, types.REWARD, Rule.FINITE),
        ),
        (
            'inf_reward',
            _with(base, reward=[0.0, np.inf, 0.0, -np.inf]),
            _fault(1, 1, types.REWARD, Rule.FINITE),
        ),
        (
            'discount_above_one',
            _with(base, discount=[1.0, 1.5, 1.0, 1.0]),
            _fault(1, 1, types.DISCOUNT, Rule.DISCOUNT_IN_RANGE),
        ),
        (
            'negative_discount',
            _with(base, discount=[1.0, 1.0, -0.5, 1.0]),
            _fault(1, 2, types.DISCOUNT, Rule.DISCOUNT_IN_RANGE),
        ),
    ]
    variants = []
    for case, bad, faults in cases:
        variants += _flag_case(case, bad, faults)
    return variants


VARIANTS: list[Variant] = [
    *_rule_cases(),
    *_missing_field(),
    *_inconsistent_shapes(),
    *_inconsistent_dtypes(),
    *_wrong_rank(),
    *_string_fields(),
    *_file_cases(),
]


def variants(*, form: str | None = None, data: bool | None = None) -> list[Variant]:
    """Selects variants by form, and by whether they open (`data=True`) or fail whole."""
    return [
        v
        for v in VARIANTS
        if (form is None or v.form == form) and (data is None or (v.failure is None) == data)
    ]
