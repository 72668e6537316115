"""Specs: step-spec checks, the TF-Agents trajectory spec, and leaf-by-leaf spec diffs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import tensorflow as tf
import tree

if TYPE_CHECKING:
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import trajectory

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import frames, types
from rlds_reverb.core.errors import SourceError, SpecMismatchError

__all__ = [
    'PolicyInfoFn',
    'create_trajectory_data_spec',
    'get_rlds_step_features',
    'get_step_spec',
]

PolicyInfoFn = Callable[[types.Step, types.Step], types.Nest] | None


def get_rlds_step_features() -> list[str]:
    """Returns the names of the fields every RLDS step holds (as TF-Agents' function does)."""
    return list(types.REQUIRED_STEP_FIELDS)


def get_step_spec(rlds_data: tf.data.Dataset) -> dict[str, types.SpecNest]:
    """Returns the step spec of an RLDS dataset after checking it holds RLDS steps.

    Args:
      rlds_data: An RLDS dataset (see `rlds_reverb.core.types`).

    Returns:
      The element spec of one step: a dict of field name to spec nest.

    Raises:
      SourceError: If the episodes hold no `steps` dataset (a `ValueError`).
      SpecMismatchError: If required step fields are missing; names them (a `ValueError`).
    """
    episode_spec = rlds_data.element_spec
    steps_spec = episode_spec.get(types.STEPS) if isinstance(episode_spec, dict) else None
    if not isinstance(steps_spec, tf.data.DatasetSpec):
        found = list(episode_spec) if isinstance(episode_spec, dict) else episode_spec
        raise SourceError(
            f"No dataset representing RLDS '{types.STEPS}' exists in the data: each episode "
            f"must be a dict with a '{types.STEPS}' tf.data.Dataset; found {found}. "
            'Pass an RLDS dataset of episodes (for example rlds_reverb.load(path)).',
            tf_agents_message=f'No dataset representing RLDS {types.STEPS} exist in the data.',
        )
    step_spec = steps_spec.element_spec
    if not isinstance(step_spec, dict):
        raise SourceError(f'RLDS steps must be dicts of fields; found a step spec {step_spec}.')
    missing = [f for f in types.REQUIRED_STEP_FIELDS if f not in step_spec]
    if missing:
        raise SpecMismatchError(
            f'Invalid RLDS step spec: missing step field(s) {missing}. Features expected are '
            f'{get_rlds_step_features()}, but found {sorted(step_spec)}. Add the missing '
            "fields (rlds_reverb.load fills a missing 'discount' with 1.0).",
            tf_agents_message=(
                f'Invalid RLDS step spec. Features expected are {get_rlds_step_features()}, '
                f'but found {list(step_spec.keys())}'
            ),
        )
    return dict(step_spec)


@contextlib.contextmanager
def use_tf_agents_messages() -> Iterator[None]:
    """Re-raises this toolkit's spec errors with TF-Agents' exact message as `str(error)`.

    The TF-Agents drop-in functions run under it, so that code comparing `str(e)` with
    TF-Agents' text keeps working. The error keeps its class (`SourceError`,
    `SpecMismatchError`, both `ValueError`s) and `differences`; our fuller message (what was
    found, what to do) travels as a PEP 678 note (`e.__notes__`, shown in tracebacks).
    Errors without a TF-Agents counterpart pass unchanged.
    """
    try:
        yield
    except (SourceError, SpecMismatchError) as e:
        message = e.tf_agents_message
        if message is None:
            raise
        error: SourceError | SpecMismatchError
        if isinstance(e, SpecMismatchError):
            error = type(e)(message, e.differences, list_differences=False)
        else:
            error = type(e)(message)
        for note in (str(e), *getattr(e, '__notes__', ())):
            error.add_note(note)
        raise error from None


def get_extra_step_fields(step_spec: dict[str, types.SpecNest]) -> list[str]:
    """Returns the names of step fields beyond the required ones, sorted."""
    return sorted(f for f in step_spec if f not in types.REQUIRED_STEP_FIELDS)


def _discount_spec(discount: tf.TensorSpec) -> tensor_spec.BoundedTensorSpec:
    """Returns TF-Agents' discount spec, keeping the data's dtype and shape."""
    from tf_agents.specs import tensor_spec  # Late, as below: `load` and `info` need no TF-Agents.

    return tensor_spec.BoundedTensorSpec(
        shape=discount.shape, dtype=discount.dtype, minimum=0.0, maximum=1.0, name='discount'
    )


def trace_policy_info_spec(
    step_spec: dict[str, types.SpecNest],
    policy_info_fn: PolicyInfoFn,
    *,
    extra_fields: types.ExtraFields | str = types.ExtraFields.DROP,
) -> types.SpecNest:
    """Returns the spec of `policy_info_fn(current_step, next_step)` for single steps.

    Without a function, the policy info is `()` (`ExtraFields.DROP`, as TF-Agents) or the
    dict of extra step fields (`ExtraFields.POLICY_INFO`; `()` when there are none).
    """
    if policy_info_fn is None:
        extra_fields = types.as_enum(types.ExtraFields, extra_fields, argument='extra_fields')
        extras = get_extra_step_fields(step_spec)
        if extra_fields is types.ExtraFields.DROP or not extras:
            return ()
        return {f: step_spec[f] for f in extras}
    concrete = tf.function(policy_info_fn).get_concrete_function(step_spec, step_spec)
    return tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype), concrete.structured_outputs
    )


def create_trajectory_data_spec(
    rlds_data: tf.data.Dataset,
    *,
    policy_info_fn: PolicyInfoFn = None,
    extra_fields: types.ExtraFields | str = types.ExtraFields.DROP,
    decode_frames: frames.FrameSelection | None = frames.ALL,
    frame_formats: frames.FrameFormats | None = None,
) -> trajectory.Trajectory:
    """Creates the trajectory spec for a Reverb table or replay buffer fed from `rlds_data`.

    Equal (`==`) to TF-Agents' `create_trajectory_data_spec` for data with float32 discounts
    (extra step fields dropped, as TF-Agents does). Unlike it, the discount keeps the data's
    dtype and shape, and `policy_info_fn`'s output (or, with
    `extra_fields='policy_info'`, the extra step fields) appears as `policy_info`.
    Errors say what TF-Agents says (`str(e)`), with the details as a note.

    Args:
      rlds_data: An RLDS dataset (see `rlds_reverb.core.types`).
      policy_info_fn: The function later given to the converter, if any.
      extra_fields: `'drop'` (default, as TF-Agents) or `'policy_info'`
        (`types.ExtraFields`); give the converter the same.
      decode_frames: For step fields holding encoded frames (`load(...,
        encoded_frames=...)`): which are decoded, as the converter decodes them by default
        ('all': `uint8[H, W, C]` specs); the others stay `tf.string`. Give the converter
        the same.
      frame_formats: The frame fields' formats; default: the dataset's
        (`core.episodes.find_frame_formats`).

    Returns:
      A `Trajectory` of specs for one (unbatched) two-step trajectory.

    Raises:
      ValueError: If no RLDS steps exist in `rlds_data`, or the step spec is invalid.
      FrameFieldError: If `decode_frames` names a field that holds no encoded frames.

    Example:
      >>> spec = create_trajectory_data_spec(rlds_reverb.load(path))
    """
    from tf_agents.trajectories import policy_step, trajectory
    from tf_agents.trajectories import time_step as ts

    with use_tf_agents_messages():
        step_spec = get_step_spec(rlds_data)
    if frame_formats is None:
        frame_formats = episodes_lib.find_frame_formats(rlds_data)
    decoded = frames.select_formats(frame_formats, decode_frames, argument='decode_frames')
    step_spec = frames.decode_spec(step_spec, decoded)
    info = trace_policy_info_spec(step_spec, policy_info_fn, extra_fields=extra_fields)
    time_step_spec = ts.time_step_spec(step_spec[types.OBSERVATION], step_spec[types.REWARD])
    action_spec = policy_step.PolicyStep(step_spec[types.ACTION], info=info)
    spec = trajectory.from_transition(time_step_spec, action_spec, time_step_spec)
    return spec._replace(discount=_discount_spec(step_spec[types.DISCOUNT]))


def _flatten_with_names(nest: types.SpecNest) -> dict[str, Any]:
    """Returns `{'a.b.0': leaf}` for every leaf of `nest` (namedtuple fields by name)."""
    return {
        '.'.join(str(p) for p in path) or '<root>': leaf
        for path, leaf in tree.flatten_with_path(nest)
    }


def _leaf_summary(spec: object) -> str:
    if isinstance(spec, tf.TypeSpec) and hasattr(spec, 'dtype'):
        return f'{spec.dtype.name}{list(spec.shape) if spec.shape.rank is not None else "[?]"}'
    return repr(spec)


def diff_specs(expected: types.SpecNest, actual: types.SpecNest) -> list[str]:
    """Returns the differences between two spec nests, one line per leaf (empty if equal).

    Leaves are compared by dtype and shape (names and bounds are ignored).

    Args:
      expected: The spec that should hold (for example a table signature).
      actual: The spec found (for example the items about to be written).

    Returns:
      Lines such as `observation.pixels: expected uint8[84, 84, 3], found float32[84, 84, 3]`.
    """
    flat_expected = _flatten_with_names(expected)
    flat_actual = _flatten_with_names(actual)
    lines = []
    for path in sorted(set(flat_expected) | set(flat_actual)):
        if path not in flat_actual:
            lines.append(f'{path}: expected {_leaf_summary(flat_expected[path])}, missing')
        elif path not in flat_expected:
            lines.append(f'{path}: unexpected field {_leaf_summary(flat_actual[path])}')
        else:
            e, a = flat_expected[path], flat_actual[path]
            if e.dtype != a.dtype or not tf.TensorShape(e.shape).is_compatible_with(a.shape):
                lines.append(f'{path}: expected {_leaf_summary(e)}, found {_leaf_summary(a)}')
    return lines


def check_specs_match(expected: types.SpecNest, actual: types.SpecNest, *, what: str) -> None:
    """Raises `SpecMismatchError` with a leaf-by-leaf diff if the specs differ.

    Args:
      expected: The spec that should hold.
      actual: The spec found.
      what: What is being compared, for the message.

    Raises:
      SpecMismatchError: If any leaf differs in dtype or shape, or is missing or unexpected.
    """
    differences = diff_specs(expected, actual)
    if differences:
        raise SpecMismatchError(f'{what}: specs differ (expected vs found):', differences)


def add_outer_dim(spec: types.SpecNest) -> types.SpecNest:
    """Returns `spec` with an unknown leading dimension on every leaf (a table signature)."""
    from tf_agents.specs import tensor_spec

    return tensor_spec.add_outer_dim(spec)
