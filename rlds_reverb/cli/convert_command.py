"""`rlds-reverb convert`: any source `load` reads, written as RLDS (TFDS format) or LeRobot.

    rlds-reverb convert ~/tensorflow_datasets/d4rl_mujoco_halfcheetah/v2-medium/1.2.0 OUT_DIR
    rlds-reverb convert SRC /data/copy/1.0.0 --episodes-per-shard 50 --overwrite
    rlds-reverb convert SRC /data/copy/1.0.0 --encoded-frames all   # JPEG/PNG bytes kept
    rlds-reverb convert SRC /data/so100_lerobot --to lerobot --fps 30 [--video] [--workers 4]

Reads SRC with `rlds_reverb.load` and writes its episodes with `rlds_reverb.save_as_rlds`
(`rlds_reverb.export.rlds_copy`) or, with `--to lerobot`, `rlds_reverb.save_as_lerobot`
(`rlds_reverb.export.lerobot`), showing a progress bar of steps and episodes on stderr
and printing a summary line (and, for LeRobot video, each camera's PSNR).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rlds_reverb.cli import common

__all__ = [
    'add_convert_parser',
]


_RLDS, _LEROBOT = 'rlds', 'lerobot'
# Options that apply to one output format only (the other refuses them by name).
_RLDS_ONLY: dict[str, object] = {
    'name': None,
    'episodes_per_shard': 100,
    'unordered': False,
    'encoded_frames': [],
}
_LEROBOT_ONLY: dict[str, object] = {
    'video': False,
    'fps': None,
    'task_field': None,
    'default_task': '',
    'robot_type': None,
    'frames_per_file': None,
    'workers': 1,
    'on_invalid': 'raise',
    'min_psnr': None,
}


def _refuse_other_options(args: argparse.Namespace) -> None:
    """Raises if an option of the other output format is given."""
    other = _LEROBOT_ONLY if args.to == _RLDS else _RLDS_ONLY
    given = [name for name, default in other.items() if getattr(args, name) != default]
    if given:
        flags = ', '.join('--' + name.replace('_', '-') for name in given)
        raise ValueError(f'{flags}: not an option of --to {args.to}.')


def _convert_to_lerobot(args: argparse.Namespace) -> int:
    from rlds_reverb.core import types
    from rlds_reverb.export import lerobot

    stats = _run_with_progress(
        args,
        lambda progress: lerobot.save_as_lerobot(
            args.source,
            args.out_dir,
            split=args.split,
            data_dir=args.data_dir,
            cameras=types.CameraMode.VIDEO if args.video else types.CameraMode.IMAGE,
            fps=args.fps,
            task_field=args.task_field or types.LANGUAGE_INSTRUCTION,
            default_task=args.default_task,
            robot_type=args.robot_type,
            frames_per_file=args.frames_per_file,
            workers=args.workers,
            on_invalid=args.on_invalid,
            min_psnr_db=args.min_psnr,
            overwrite=args.overwrite,
            progress=progress,
        ),
        unit=' frames',
    )
    kept = (
        f', {stats.resumed_episodes} kept from an interrupted run' if stats.resumed_episodes else ''
    )
    skipped = f', {stats.skipped_episodes} invalid skipped' if stats.skipped_episodes else ''
    print(
        f'Converted {stats.episodes} episodes ({stats.frames} frames, {stats.tasks} tasks'
        f'{kept}{skipped}) from {args.source} to the LeRobot dataset {stats.directory} in '
        f'{stats.seconds:.2f} s ({stats.frames_per_second:,.0f} frames/s).'
    )
    for camera, psnr in stats.psnr_db.items():
        worst = stats.worst_frame_psnr_db[camera]
        print(f'  {camera}: AV1 video, PSNR {psnr:.2f} dB (worst frame {worst:.2f} dB).')
    for note in stats.not_written:
        print(f'  {note}')
    return common.EXIT_OK


def _run_with_progress(args: argparse.Namespace, save: Callable, *, unit: str = ' steps'):
    """Returns `save(progress)` run with a progress bar; on an error, says what landed."""
    bar = common.ProgressBar(disable=args.no_progress, unit=unit)
    try:
        result = save(bar.update)
    except BaseException as error:
        bar.close()
        # The one-line error report shows the message only: say what landed here.
        if not args.debug:
            for note in getattr(error, '__notes__', ()):
                print(f'rlds-reverb convert: {note}', file=sys.stderr)
        raise
    bar.close()
    return result


def _convert(args: argparse.Namespace) -> int:
    _refuse_other_options(args)
    if args.to == _LEROBOT:
        return _convert_to_lerobot(args)
    from rlds_reverb.core import checks
    from rlds_reverb.export import rlds_copy

    checks.check_int_at_least(args.episodes_per_shard, 1, argument='--episodes-per-shard')
    stats = _run_with_progress(
        args,
        lambda progress: rlds_copy.save_as_rlds(
            args.source,
            args.out_dir,
            split=args.split,
            data_dir=args.data_dir,
            name=args.name,
            episodes_per_shard=args.episodes_per_shard,
            keep_order=not args.unordered,
            overwrite=args.overwrite,
            encoded_frames=common.read_encoded_frames(args),
            progress=progress,
        ),
    )
    print(
        f'Converted {stats.episodes} episodes ({stats.steps} steps) from {args.source} to '
        f'{stats.directory} in {stats.seconds:.2f} s ({stats.steps_per_second:,.0f} steps/s).'
    )
    return common.EXIT_OK


def add_convert_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `convert`: write any source `load` reads as an RLDS TFDS or a LeRobot dataset."""
    parser = subparsers.add_parser(
        'convert', help='write any dataset load reads as an RLDS TFDS or a LeRobot dataset'
    )
    common.add_source_arguments(parser)
    parser.add_argument(
        'out_dir', help='the dataset directory to write (a TFDS version dir, or a LeRobot dir)'
    )
    parser.add_argument(
        '--to',
        choices=(_RLDS, _LEROBOT),
        default=_RLDS,
        help='the output format: RLDS in TFDS format (default) or LeRobot v3.0',
    )
    parser.add_argument(
        '--name', default=None, help="the TFDS name (default: from OUT_DIR, 'name/1.0.0')"
    )
    parser.add_argument(
        '--episodes-per-shard', type=int, default=100, help='episodes per TFRecord shard'
    )
    parser.add_argument(
        '--overwrite', action='store_true', help='replace the dataset already in OUT_DIR'
    )
    parser.add_argument(
        '--unordered',
        action='store_true',
        help="let TFDS shuffle the copy's shards (default: it reads back in SRC's order)",
    )
    common.add_load_option_arguments(parser)  # --encoded-frames: frames copied as bytes.
    _add_lerobot_options(parser)
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_convert)
    return parser


def _add_lerobot_options(parser: argparse.ArgumentParser) -> None:
    """The options of `--to lerobot` (docs/lerobot.md)."""
    group = parser.add_argument_group('--to lerobot')
    group.add_argument(
        '--video', action='store_true', help='cameras as AV1 video (lossy; default: PNG images)'
    )
    group.add_argument('--fps', type=float, default=None, help='frames per second')
    group.add_argument(
        '--task-field', default=None, help="the step field of the tasks ('language_instruction')"
    )
    group.add_argument('--default-task', default='', help='the task when there is no task field')
    group.add_argument('--robot-type', default=None, help="info.json's robot_type")
    group.add_argument(
        '--frames-per-file', type=int, default=None, help='frames per data and video file'
    )
    group.add_argument('--workers', type=int, default=1, help='processes writing at once')
    group.add_argument(
        '--on-invalid', choices=('raise', 'skip'), default='raise', help='invalid episodes'
    )
    group.add_argument(
        '--min-psnr', type=float, default=None, help='fail below this video PSNR (dB)'
    )
