"""Mixtures of several RLDS datasets, by weight, with exact proportions (docs/mixtures.md).

`mix_datasets` brings several datasets (any sources `rlds_reverb.load` reads, or RLDS
datasets it returned) to one step spec, each by its declared `FieldMapping`
(`rlds_reverb.transform.field_mapping`), and interleaves them by weight, episode by
episode or step by step (`MixtureLevel`).

Exact proportions. Which dataset gives the n-th element is drawn before, and apart from,
everything that may skip data: draw n is `stateless_uniform(seed=[seed, n])`, mapped to a
dataset by the cumulative weights; that dataset then gives its next *valid* element
(validation drops invalid episodes inside each dataset's own stream, `on_invalid=SKIP`).
So the sequence of sources is a fixed function of the seed and the weights alone: the
proportions are those of i.i.d. categorical draws with the target weights, whatever
validation skips (Octo-style pipelines that filter *after* sampling from datasets drift
towards the datasets with fewer invalid episodes).

State. The draws are a pure function of a counter, and the interleave is
`tf.data.Dataset.choose_from_datasets`: every bit of state is tf.data's own, so the same
seed gives the same stream, and an iterator saved with `tf.train.Checkpoint(iterator=it)`
and restored continues identically.

Exhausted datasets (`MixtureEnd`): `REPEAT` (the default) starts a dataset again when it
runs out; `STOP` ends the mixture at the first draw of a dataset that has run out (the
proportions of what came before are exact). A dataset without a single valid episode ends
the mixture in both modes, the first time it is drawn.

Counts. `Mixture.count_choices(n)` gives how many of the first n elements each dataset
gives (from the draws alone: exact, cheap); `Mixture.proportions` the normalized weights.

Reverb tables. `LearnerDataset(address, tables={table: ratio})` mixes *tables* by giving
every batch exactly the largest-remainder counts of the ratios (`learn.plan`): fixed per
batch, rather than drawn. `LearnerDataset(address, tables=mixture.table_ratios(names))`
(one table per dataset) gives the same long-run proportions as the mixture
(docs/mixtures.md compares the two).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.check.in_graph import InGraphCheck
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types
from rlds_reverb.core.errors import SpecMismatchError
from rlds_reverb.read.loading import load
from rlds_reverb.transform.field_mapping import FieldMapping

__all__ = [
    'Mixture',
    'MixtureEnd',
    'MixtureLevel',
    'SizeWeighting',
    'mix_datasets',
]

# Draws made at once: one stateless uniform per block of draws.
_BLOCK = 1024


class MixtureLevel(enum.Enum):
    """What one draw of a mixture gives.

    EPISODE: a whole episode (the mixture is an RLDS dataset).
    STEP: one step (the mixture is a dataset of step dicts); a dataset's episodes are
        read in order and cut into steps, so consecutive draws of one dataset give
        consecutive steps of its stream.
    """

    EPISODE = 'episode'
    STEP = 'step'


class SizeWeighting(enum.Enum):
    """Whether a dataset's weight is multiplied by its size (counted in one pass first).

    NONE: the weights as given.
    EPISODES: weight × the dataset's number of valid episodes.
    STEPS: weight × the dataset's number of steps in valid episodes.
    """

    NONE = 'none'
    EPISODES = 'episodes'
    STEPS = 'steps'


class MixtureEnd(enum.Enum):
    """What happens when the dataset a draw picks has run out.

    REPEAT: it starts again from its first valid element (the mixture never ends).
    STOP: the mixture ends there.
    """

    REPEAT = 'repeat'
    STOP = 'stop'


@dataclasses.dataclass(frozen=True)
class Mixture:
    """A mixture of datasets: its `tf.data` stream, its proportions, and its draws.

    Attributes:
      dataset: The mixed stream: an RLDS dataset (`MixtureLevel.EPISODE`; episodes hold
        `steps` only) or a dataset of steps (`MixtureLevel.STEP`).
      names: The datasets' names, in the order of `choices`' indices.
      proportions: `{name: probability}` of each draw (weights, times sizes, normalized).
      sizes: `{name: size}` counted for `SizeWeighting`, or None when not counted.
      choices: The draws: element n is the index (into `names`) of the dataset that gives
        the mixture's n-th element.
      seed: The seed of the draws.
    """

    dataset: tf.data.Dataset
    names: tuple[str, ...]
    proportions: dict[str, float]
    sizes: dict[str, int] | None
    choices: tf.data.Dataset
    seed: int

    def count_choices(self, num_elements: int) -> dict[str, int]:
        """Returns how many of the first `num_elements` elements each dataset gives.

        Exact for every stream the mixture yields that far (with `MixtureEnd.STOP` it may
        end sooner). Computed from the draws alone, without reading any data.

        Args:
          num_elements: How many elements (>= 0).

        Returns:
          `{name: count}`, summing to `num_elements`.

        Raises:
          ValueError: If `num_elements` is negative or not an integer.

        Example:
          >>> mixture.count_choices(100_000)
          {'bridge': 70_112, 'kitchen': 29_888}
        """
        if isinstance(num_elements, bool) or not isinstance(num_elements, int | np.integer):
            raise ValueError(f'num_elements={num_elements!r} must be an integer >= 0.')
        if num_elements < 0:
            raise ValueError(f'num_elements={num_elements} must be an integer >= 0.')
        probabilities = [self.proportions[name] for name in self.names]
        num_blocks = -(-num_elements // _BLOCK)
        blocks = _draw_blocks(probabilities, seed=self.seed).take(num_blocks)
        drawn = np.concatenate([b.numpy().ravel() for b in blocks.batch(64)] or [np.zeros(0)])
        counts = np.bincount(drawn[:num_elements].astype(np.int64), minlength=len(self.names))
        return {name: int(c) for name, c in zip(self.names, counts, strict=True)}

    def table_ratios(self, tables: Mapping[str, str]) -> dict[str, float]:
        """Returns `{table: ratio}` for `LearnerDataset`: each dataset's proportion, by table.

        Args:
          tables: `{dataset name: table}`, one table per dataset (as `push` wrote them).

        Returns:
          The ratios `LearnerDataset(address, tables=...)` takes.

        Raises:
          ValueError: If `tables` does not name each dataset exactly once, or names one
            table twice.

        Example:
          >>> LearnerDataset(address, mixture.table_ratios({'a': 'table_a', 'b': 'table_b'}))
        """
        if set(tables) != set(self.names) or len(set(tables.values())) != len(tables):
            raise ValueError(
                f'tables={dict(tables)} must give each dataset of the mixture '
                f'({", ".join(self.names)}) its own table.'
            )
        return {tables[name]: self.proportions[name] for name in self.names}


def _check_weights(names: list[str], weights: Mapping[str, Any]) -> list[float]:
    """Returns the weights in `names`' order, refusing missing, extra or bad ones."""
    if set(weights) != set(names):
        raise ValueError(f'weights must name exactly the datasets {names}; got {sorted(weights)}.')
    checked = []
    for name in names:
        weight = weights[name]
        if isinstance(weight, bool) or not isinstance(weight, int | float | np.number):
            raise ValueError(f'The weight of dataset {name!r} must be a number; got {weight!r}.')
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(
                f'The weight of dataset {name!r} must be finite and >= 0; got {weight}.'
            )
        checked.append(float(weight))
    return checked


def _normalize(names: list[str], weights: list[float], what: str) -> list[float]:
    total = sum(weights)
    if not total > 0:
        raise ValueError(
            f'The {what} {dict(zip(names, weights, strict=True))} must sum to a positive '
            'number: give at least one dataset a weight > 0 (and, weighted by size, data).'
        )
    return [w / total for w in weights]


def _draw_blocks(probabilities: list[float], *, seed: int) -> tf.data.Dataset:
    """Returns the draws in blocks: block k holds draws k·B .. k·B + B − 1 (B = `_BLOCK`).

    Block k is `stateless_uniform([B], seed=[seed, k])` mapped to dataset indices by the
    cumulative probabilities: a pure function of (seed, k), vectorized.
    """
    cumulative = np.cumsum(np.asarray(probabilities, np.float64))
    cumulative[-1] = 1.0  # u < 1 always falls in some bin: no index past the last.
    bounds = tf.constant(cumulative, tf.float64)
    seed_tensor = tf.constant(seed, tf.int64)

    def _draw(block: tf.Tensor) -> tf.Tensor:
        seeds = tf.stack([seed_tensor, block])
        u = tf.random.stateless_uniform([_BLOCK], seed=seeds, dtype=tf.float64)
        return tf.searchsorted(bounds, u, side='right', out_type=tf.int64)

    return tf.data.Dataset.counter(dtype=tf.int64).map(_draw)


def make_choices(probabilities: list[float], *, seed: int) -> tf.data.Dataset:
    """Returns the draws: element n is the dataset index of draw n, a function of (seed, n).

    Args:
      probabilities: One per dataset, >= 0, summing to 1.
      seed: The seed (an integer).

    Returns:
      An endless `tf.data.Dataset` of int64 indices (checkpointable: a counter, a
      stateless map and an unbatch).

    Example:
      >>> list(make_choices([0.5, 0.5], seed=0).take(4).as_numpy_iterator())
    """
    return _draw_blocks(probabilities, seed=seed).unbatch()


def _open(source: Any) -> tf.data.Dataset:
    return source if isinstance(source, tf.data.Dataset) else load(source)


def _valid_steps(episodes: tf.data.Dataset, on_invalid: types.ValidationMode) -> tf.data.Dataset:
    """Returns the dataset's episodes' whole `[T, ...]` steps, invalid ones dropped or failing."""
    check = InGraphCheck(episodes, specs.get_step_spec(episodes))
    whole = episodes_lib.to_whole_episodes(episodes)
    steps = whole.map(lambda episode: episode[types.STEPS])
    if on_invalid is types.ValidationMode.SKIP:
        return steps.filter(episodes_lib.without_autograph(check.is_valid))
    return steps.enumerate().map(
        episodes_lib.without_autograph(lambda i, s: check.assert_valid(i, s, check_first=True))
    )


def _count_size(steps: tf.data.Dataset, weighting: SizeWeighting) -> int:
    """Returns a dataset's size in valid episodes or steps: one pass over its episodes."""
    if weighting is SizeWeighting.EPISODES:
        sizes = steps.map(lambda s: tf.constant(1, tf.int64))
    else:
        sizes = steps.map(lambda s: tf.cast(episodes_lib.episode_length(s), tf.int64))
    return int(sizes.reduce(tf.constant(0, tf.int64), lambda total, n: total + n).numpy())


def _common_spec(mapped: dict[str, dict]) -> dict:
    """Returns the one step spec every mapped dataset shares, or names the differences."""
    names = list(mapped)
    reference = mapped[names[0]]
    for name in names[1:]:
        differences = specs.diff_specs(reference, mapped[name])
        if differences:
            raise SpecMismatchError(
                f'Dataset {name!r} has a different step spec from dataset {names[0]!r} after '
                'their field mappings; declare a FieldMapping (drop, rename, cast) that '
                f'brings {name!r} to the common spec ({names[0]!r} expected, {name!r} found):',
                differences,
            )
    return reference


def _common_frame_formats(formats: dict[str, dict]) -> dict:
    """Returns the encoded frame fields' formats all datasets share, or names a difference."""
    names = list(formats)
    reference = formats[names[0]]
    for name in names[1:]:
        for path in sorted(set(reference) | set(formats[name])):
            if reference.get(path) != formats[name].get(path):
                raise SpecMismatchError(
                    f'Frame field {path!r} is encoded as {reference.get(path)} in dataset '
                    f'{names[0]!r} but as {formats[name].get(path)} in {name!r}; load both '
                    'with the same encoded_frames, or drop the field from one.'
                )
    return reference


def _prepare(
    name: str,
    source: Any,
    mapping: FieldMapping,
    on_invalid: types.ValidationMode,
) -> tuple[tf.data.Dataset, dict, dict]:
    """Returns one dataset's valid, mapped whole steps, its mapped spec and frame formats."""
    episodes = _open(source)
    step_spec = specs.get_step_spec(episodes)
    mapped_spec = mapping.map_spec(step_spec, dataset=name)
    formats = mapping.map_frame_formats(episodes_lib.find_frame_formats(episodes))
    steps = _valid_steps(episodes, on_invalid)
    return steps, mapped_spec, formats


def _stream(
    steps: tf.data.Dataset, mapping: FieldMapping, level: MixtureLevel, end: MixtureEnd
) -> tf.data.Dataset:
    """Returns one dataset's elements as the mixture draws them: mapped, cut, repeated."""
    mapped = steps.map(episodes_lib.without_autograph(mapping.map_steps))
    if level is MixtureLevel.STEP:
        mapped = mapped.unbatch()
    # An input without a single element ends `repeat()` at once (tf.data's rule), so a
    # dataset with no valid episode ends the mixture instead of spinning.
    return mapped.repeat() if end is MixtureEnd.REPEAT else mapped


def mix_datasets(
    datasets: Mapping[str, Any],
    *,
    weights: Mapping[str, float],
    seed: int,
    level: MixtureLevel | str = MixtureLevel.EPISODE,
    mappings: Mapping[str, FieldMapping] | None = None,
    weight_by_size: SizeWeighting | str = SizeWeighting.NONE,
    on_end: MixtureEnd | str = MixtureEnd.REPEAT,
    on_invalid: types.ValidationMode | str = types.ValidationMode.SKIP,
) -> Mixture:
    """Returns a mixture of datasets by weight, with exact proportions (see the module doc).

    Args:
      datasets: `{name: source}`: RLDS datasets (what `rlds_reverb.load` returns, with any
        options) or sources `load` reads with its defaults (a TFDS directory, LeRobot,
        Minari, D4RL). At least one.
      weights: `{name: weight}` for every dataset (>= 0, finite, some > 0).
      seed: Seeds the draws: the same seed, weights and data give the same stream.
      level: Mix whole episodes or single steps (`MixtureLevel`).
      mappings: `{name: FieldMapping}` bringing datasets to the common step spec (a
        dataset without one is taken as it is). Episode-level fields (metadata) are left
        out of a mixture.
      weight_by_size: Multiply each weight by the dataset's valid episodes or steps
        (`SizeWeighting`; counted in one pass over every dataset when the mixture is made).
      on_end: What a draw of a dataset that has run out does (`MixtureEnd`).
      on_invalid: `SKIP` drops invalid episodes inside each dataset's stream (the draws
        stay the same); `RAISE` fails the iterator at the first one, naming its problems.

    Returns:
      The `Mixture`: its `dataset`, `proportions`, `sizes`, and the draws (`choices`,
      `count_choices`).

    Raises:
      ValueError: If `seed` is not an integer, `datasets` is empty, `weights` does not name exactly the datasets, a
        weight is negative or not finite, no weight (times size) is positive, an enum
        value is not valid, or `on_invalid` is `REPORT`.
      SpecMismatchError: If a mapping names a field a dataset does not hold, or the
        mapped step specs (or encoded frame formats) differ: the message names each
        differing field and both specs.
      SourceError: If a source cannot be read (from `rlds_reverb.load`).

    Example:
      >>> mixture = mix_datasets(
      ...     {'bridge': bridge_dir, 'kitchen': kitchen_dir},
      ...     weights={'bridge': 0.7, 'kitchen': 0.3},
      ...     seed=0,
      ...     mappings={'kitchen': FieldMapping(rename={'observation/proprio': 'observation/state'})},
      ... )
      >>> for episode in mixture.dataset.take(10): ...
    """
    mix_level = types.as_enum(MixtureLevel, level, argument='level')
    weighting = types.as_enum(SizeWeighting, weight_by_size, argument='weight_by_size')
    end = types.as_enum(MixtureEnd, on_end, argument='on_end')
    invalid_mode = types.as_enum(types.ValidationMode, on_invalid, argument='on_invalid')
    if invalid_mode is types.ValidationMode.REPORT:
        raise ValueError("on_invalid='report' does not mix; use 'skip' or 'raise'.")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f'seed={seed!r} must be an integer.')
    names = list(datasets)
    if not names:
        raise ValueError('mix_datasets needs at least one dataset; got none.')
    given = _check_weights(names, weights)
    mappings = dict(mappings or {})
    unknown = sorted(set(mappings) - set(names))
    if unknown:
        raise ValueError(f'mappings name datasets {unknown} that are not mixed ({names}).')
    prepared = {
        name: _prepare(name, datasets[name], mappings.get(name, FieldMapping()), invalid_mode)
        for name in names
    }
    _common_spec({name: spec for name, (_, spec, _) in prepared.items()})
    formats = _common_frame_formats({name: f for name, (_, _, f) in prepared.items()})
    sizes = None
    if weighting is not SizeWeighting.NONE:
        sizes = {name: _count_size(steps, weighting) for name, (steps, _, _) in prepared.items()}
        given = [w * sizes[name] for w, name in zip(given, names, strict=True)]
    probabilities = _normalize(names, given, 'weights')
    choices = make_choices(probabilities, seed=seed)
    streams = [
        _stream(prepared[name][0], mappings.get(name, FieldMapping()), mix_level, end)
        for name in names
    ]
    mixed = tf.data.Dataset.choose_from_datasets(streams, choices, stop_on_empty_dataset=True)
    if mix_level is MixtureLevel.EPISODE:
        mixed = episodes_lib.from_whole_episodes(
            mixed.map(lambda steps: {types.STEPS: steps}), frame_formats=formats
        )
    return Mixture(
        dataset=mixed,
        names=tuple(names),
        proportions=dict(zip(names, probabilities, strict=True)),
        sizes=sizes,
        choices=choices,
        seed=seed,
    )
