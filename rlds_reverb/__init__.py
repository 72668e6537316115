"""rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb tables, fast.

The verbs, in the order data flows:

    load            open an RLDS dataset (a TFDS directory or name, envlogger, LeRobot,
                    Minari, D4RL, `tf.data`) as whole-episode tensors, through a registry
                    of readers; camera frames kept encoded on request
                    (`list_frame_fields`, `frames`); shuffled within a memory budget
                    in bytes (`shuffle_within_budget`)
    validate        check every rule on every episode; name each problem
    statistics      per-field, per-dimension statistics (`compute_statistics`,
                    `ensure_statistics`: saved beside the dataset) and `normalize` with them
    mix_datasets    several datasets brought to one spec (`FieldMapping`) and mixed by
                    weight with exact proportions, seeded and resumable
    adders          (the top-level `adders` package) n-step, GAE, sequences and frame
                    stacking as `tf.data` transforms
    push            write episodes into Reverb tables as items (`items`, `tables`,
                    `PushOptions`)
    LearnerDataset  sample batches for TF-Agents learners: mixing, importance weights,
                    priority updates (`SamplingOptions`)
    export          back to RLDS: `export_table` (`ExportOptions`), `RldsRecorder`,
                    `save_as_rlds`; and to LeRobot: `save_as_lerobot`

The package is arranged by role, in the same order; each room imports only itself and the
rooms listed before it (docs/architecture.md lists every module):

    core/       vocabulary (field names, enums), errors, argument checks, specs, episode tensors
    storage/    RLDS on disk: the TFDS dataset writer
    read/       open RLDS datasets as whole episodes
    check/      validate and describe datasets
    adders/     (the top-level `adders` package) tf.data transforms; they build on `core` only
    transform/  two-step trajectories (TF-Agents drop-in), item kinds, per-episode write plans
    serve/      table presets and lookups, servers, checkpoints
    write/      push into Reverb (writer engines), observers, resumable pushes, seeding
    distribute/ the Apache Beam pipeline: push into several Reverb servers (`beam` extra)
    learn/      learner datasets: mixing, importance weights, priority updates
    export/     back to RLDS: export Reverb tables, record TF-Agents drivers
    examples/   the embedded CartPole data, synthetic data, the demo agent (offline CQL-DQN)
    cli/        the `rlds-reverb` command line

The names below are the public API (`__all__`). `import rlds_reverb` only defines them: each
loads on first use (PEP 562), so the command line starts without importing TensorFlow until
something needs it; type checkers and IDEs read the same names from the static imports
under `TYPE_CHECKING` (`tests/system/test_api.py` keeps the two lists equal). See
`rlds_reverb.core.types` for what an RLDS dataset is here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlds_reverb.version import __version__

# Public name -> 'module' (the module itself) or 'module:attribute'.
_EXPORTS = {
    # Modules that are part of the public API under short names.
    'checkpoints': 'rlds_reverb.serve.checkpoints',
    'frames': 'rlds_reverb.transform.frames',
    'items': 'rlds_reverb.transform.items',
    'observers': 'rlds_reverb.write.observers',
    'priorities': 'rlds_reverb.learn.priorities',
    'sampling': 'rlds_reverb.learn.sampling',
    'tables': 'rlds_reverb.serve.tables',
    # Functions, classes and every error class (rlds_reverb.core.errors).
    'CheckpointError': 'rlds_reverb.core.errors:CheckpointError',
    'D4rlFileError': 'rlds_reverb.core.errors:D4rlFileError',
    'DistributedPushError': 'rlds_reverb.core.errors:DistributedPushError',
    'EmptyTableError': 'rlds_reverb.core.errors:EmptyTableError',
    'EpisodeTooLongError': 'rlds_reverb.core.errors:EpisodeTooLongError',
    'ExportError': 'rlds_reverb.core.errors:ExportError',
    'FrameFieldError': 'rlds_reverb.core.errors:FrameFieldError',
    'InvalidEpisodeError': 'rlds_reverb.core.errors:InvalidEpisodeError',
    'LeRobotExportError': 'rlds_reverb.core.errors:LeRobotExportError',
    'LeRobotFormatError': 'rlds_reverb.core.errors:LeRobotFormatError',
    'MinariFormatError': 'rlds_reverb.core.errors:MinariFormatError',
    'PushError': 'rlds_reverb.core.errors:PushError',
    'ResumeError': 'rlds_reverb.core.errors:ResumeError',
    'ReverbConnectionError': 'rlds_reverb.core.errors:ReverbConnectionError',
    'ReverbTimeoutError': 'rlds_reverb.core.errors:ReverbTimeoutError',
    'RldsReverbError': 'rlds_reverb.core.errors:RldsReverbError',
    'SourceError': 'rlds_reverb.core.errors:SourceError',
    'SourceNotFoundError': 'rlds_reverb.core.errors:SourceNotFoundError',
    'SpecMismatchError': 'rlds_reverb.core.errors:SpecMismatchError',
    'TableError': 'rlds_reverb.core.errors:TableError',
    'TableTooSmallError': 'rlds_reverb.core.errors:TableTooSmallError',
    'FrameFormat': 'rlds_reverb.core.frames:FrameFormat',
    'create_trajectory_data_spec': 'rlds_reverb.core.specs:create_trajectory_data_spec',
    'get_rlds_step_features': 'rlds_reverb.core.specs:get_rlds_step_features',
    'CameraMode': 'rlds_reverb.core.types:CameraMode',
    'EndBehavior': 'rlds_reverb.core.types:EndBehavior',
    'ValidationMode': 'rlds_reverb.core.types:ValidationMode',
    'LoadOptions': 'rlds_reverb.read.options:LoadOptions',
    'list_frame_fields': 'rlds_reverb.read.loading:list_frame_fields',
    'load': 'rlds_reverb.read.loading:load',
    'register_reader': 'rlds_reverb.read.loading:register_reader',
    'ShuffleStats': 'rlds_reverb.read.shuffle:ShuffleStats',
    'ShuffleUnit': 'rlds_reverb.read.shuffle:ShuffleUnit',
    'shuffle_within_budget': 'rlds_reverb.read.shuffle:shuffle_within_budget',
    'read_lerobot_metadata': 'rlds_reverb.read.lerobot:read_lerobot_metadata',
    'write_report': 'rlds_reverb.check.report_html:write_report',
    'DatasetStatistics': 'rlds_reverb.check.statistics:DatasetStatistics',
    'compute_statistics': 'rlds_reverb.check.statistics:compute_statistics',
    'ensure_statistics': 'rlds_reverb.check.statistics_files:ensure_statistics',
    'ValidationReport': 'rlds_reverb.check.validation:ValidationReport',
    'validate': 'rlds_reverb.check.validation:validate',
    'convert_rlds_to_trajectories': 'rlds_reverb.transform.convert:convert_rlds_to_trajectories',
    'FieldNormalization': 'rlds_reverb.transform.normalize:FieldNormalization',
    'NormalizationMode': 'rlds_reverb.transform.normalize:NormalizationMode',
    'Normalizer': 'rlds_reverb.transform.normalize:Normalizer',
    'normalize': 'rlds_reverb.transform.normalize:normalize',
    'unnormalize': 'rlds_reverb.transform.normalize:unnormalize',
    'FieldMapping': 'rlds_reverb.transform.field_mapping:FieldMapping',
    'Mixture': 'rlds_reverb.transform.mixture:Mixture',
    'MixtureEnd': 'rlds_reverb.transform.mixture:MixtureEnd',
    'MixtureLevel': 'rlds_reverb.transform.mixture:MixtureLevel',
    'SizeWeighting': 'rlds_reverb.transform.mixture:SizeWeighting',
    'mix_datasets': 'rlds_reverb.transform.mixture:mix_datasets',
    'PushOptions': 'rlds_reverb.write.options:PushOptions',
    'PushStats': 'rlds_reverb.write.push:PushStats',
    'push': 'rlds_reverb.write.push:push',
    'push_rlds_to_reverb': 'rlds_reverb.write.push:push_rlds_to_reverb',
    'seed_server': 'rlds_reverb.write.seed:seed_server',
    'ServerStatus': 'rlds_reverb.serve.status:ServerStatus',
    'fetch_server_status': 'rlds_reverb.serve.status:fetch_server_status',
    'LearnerDataset': 'rlds_reverb.learn.sampling:LearnerDataset',
    'SampleBatch': 'rlds_reverb.learn.sampling:SampleBatch',
    'SamplingOptions': 'rlds_reverb.learn.options:SamplingOptions',
    'ExportOptions': 'rlds_reverb.export.options:ExportOptions',
    'RldsRecorder': 'rlds_reverb.export.recorder:RldsRecorder',
    'export_table': 'rlds_reverb.export.reverb_export:export_table',
    'save_as_rlds': 'rlds_reverb.export.rlds_copy:save_as_rlds',
    'save_as_lerobot': 'rlds_reverb.export.lerobot:save_as_lerobot',
    # Needs the `beam` extra (Apache Beam); imported only when used.
    'push_with_beam': 'rlds_reverb.distribute.pipeline:push_with_beam',
    'compute_statistics_with_beam': 'rlds_reverb.distribute.statistics:compute_statistics_with_beam',
}

__all__ = [
    'CameraMode',
    'CheckpointError',
    'D4rlFileError',
    'DatasetStatistics',
    'DistributedPushError',
    'EmptyTableError',
    'EndBehavior',
    'EpisodeTooLongError',
    'ExportError',
    'ExportOptions',
    'FieldMapping',
    'FieldNormalization',
    'FrameFieldError',
    'FrameFormat',
    'InvalidEpisodeError',
    'LeRobotExportError',
    'LeRobotFormatError',
    'LearnerDataset',
    'LoadOptions',
    'MinariFormatError',
    'Mixture',
    'MixtureEnd',
    'MixtureLevel',
    'NormalizationMode',
    'Normalizer',
    'PushError',
    'PushOptions',
    'PushStats',
    'ResumeError',
    'ReverbConnectionError',
    'ReverbTimeoutError',
    'RldsRecorder',
    'RldsReverbError',
    'SampleBatch',
    'SamplingOptions',
    'ServerStatus',
    'ShuffleStats',
    'ShuffleUnit',
    'SizeWeighting',
    'SourceError',
    'SourceNotFoundError',
    'SpecMismatchError',
    'TableError',
    'TableTooSmallError',
    'ValidationMode',
    'ValidationReport',
    '__version__',
    'checkpoints',
    'compute_statistics',
    'compute_statistics_with_beam',
    'convert_rlds_to_trajectories',
    'create_trajectory_data_spec',
    'ensure_statistics',
    'export_table',
    'fetch_server_status',
    'frames',
    'get_rlds_step_features',
    'items',
    'list_frame_fields',
    'load',
    'mix_datasets',
    'normalize',
    'observers',
    'priorities',
    'push',
    'push_rlds_to_reverb',
    'push_with_beam',
    'read_lerobot_metadata',
    'register_reader',
    'sampling',
    'save_as_lerobot',
    'save_as_rlds',
    'seed_server',
    'shuffle_within_budget',
    'tables',
    'unnormalize',
    'validate',
    'write_report',
]

if TYPE_CHECKING:
    # The same names as `_EXPORTS`, written out for type checkers and IDEs (never run).
    from rlds_reverb.check.report_html import write_report as write_report
    from rlds_reverb.check.statistics import DatasetStatistics as DatasetStatistics
    from rlds_reverb.check.statistics import compute_statistics as compute_statistics
    from rlds_reverb.check.statistics_files import ensure_statistics as ensure_statistics
    from rlds_reverb.check.validation import ValidationReport as ValidationReport
    from rlds_reverb.check.validation import validate as validate
    from rlds_reverb.core.errors import CheckpointError as CheckpointError
    from rlds_reverb.core.errors import D4rlFileError as D4rlFileError
    from rlds_reverb.core.errors import DistributedPushError as DistributedPushError
    from rlds_reverb.core.errors import EmptyTableError as EmptyTableError
    from rlds_reverb.core.errors import EpisodeTooLongError as EpisodeTooLongError
    from rlds_reverb.core.errors import ExportError as ExportError
    from rlds_reverb.core.errors import FrameFieldError as FrameFieldError
    from rlds_reverb.core.errors import InvalidEpisodeError as InvalidEpisodeError
    from rlds_reverb.core.errors import LeRobotExportError as LeRobotExportError
    from rlds_reverb.core.errors import LeRobotFormatError as LeRobotFormatError
    from rlds_reverb.core.errors import MinariFormatError as MinariFormatError
    from rlds_reverb.core.errors import PushError as PushError
    from rlds_reverb.core.errors import ResumeError as ResumeError
    from rlds_reverb.core.errors import ReverbConnectionError as ReverbConnectionError
    from rlds_reverb.core.errors import ReverbTimeoutError as ReverbTimeoutError
    from rlds_reverb.core.errors import RldsReverbError as RldsReverbError
    from rlds_reverb.core.errors import SourceError as SourceError
    from rlds_reverb.core.errors import SourceNotFoundError as SourceNotFoundError
    from rlds_reverb.core.errors import SpecMismatchError as SpecMismatchError
    from rlds_reverb.core.errors import TableError as TableError
    from rlds_reverb.core.errors import TableTooSmallError as TableTooSmallError
    from rlds_reverb.core.frames import FrameFormat as FrameFormat
    from rlds_reverb.core.specs import create_trajectory_data_spec as create_trajectory_data_spec
    from rlds_reverb.core.specs import get_rlds_step_features as get_rlds_step_features
    from rlds_reverb.core.types import CameraMode as CameraMode
    from rlds_reverb.core.types import EndBehavior as EndBehavior
    from rlds_reverb.core.types import ValidationMode as ValidationMode
    from rlds_reverb.distribute.pipeline import push_with_beam as push_with_beam
    from rlds_reverb.distribute.statistics import (
        compute_statistics_with_beam as compute_statistics_with_beam,
    )
    from rlds_reverb.export.lerobot import save_as_lerobot as save_as_lerobot
    from rlds_reverb.export.options import ExportOptions as ExportOptions
    from rlds_reverb.export.recorder import RldsRecorder as RldsRecorder
    from rlds_reverb.export.reverb_export import export_table as export_table
    from rlds_reverb.export.rlds_copy import save_as_rlds as save_as_rlds
    from rlds_reverb.learn import priorities as priorities
    from rlds_reverb.learn import sampling as sampling
    from rlds_reverb.learn.options import SamplingOptions as SamplingOptions
    from rlds_reverb.learn.sampling import LearnerDataset as LearnerDataset
    from rlds_reverb.learn.sampling import SampleBatch as SampleBatch
    from rlds_reverb.read.lerobot import read_lerobot_metadata as read_lerobot_metadata
    from rlds_reverb.read.loading import list_frame_fields as list_frame_fields
    from rlds_reverb.read.loading import load as load
    from rlds_reverb.read.loading import register_reader as register_reader
    from rlds_reverb.read.options import LoadOptions as LoadOptions
    from rlds_reverb.read.shuffle import ShuffleStats as ShuffleStats
    from rlds_reverb.read.shuffle import ShuffleUnit as ShuffleUnit
    from rlds_reverb.read.shuffle import shuffle_within_budget as shuffle_within_budget
    from rlds_reverb.serve import checkpoints as checkpoints
    from rlds_reverb.serve import tables as tables
    from rlds_reverb.serve.status import ServerStatus as ServerStatus
    from rlds_reverb.serve.status import fetch_server_status as fetch_server_status
    from rlds_reverb.transform import frames as frames
    from rlds_reverb.transform import items as items
    from rlds_reverb.transform.convert import (
        convert_rlds_to_trajectories as convert_rlds_to_trajectories,
    )
    from rlds_reverb.transform.field_mapping import FieldMapping as FieldMapping
    from rlds_reverb.transform.mixture import Mixture as Mixture
    from rlds_reverb.transform.mixture import MixtureEnd as MixtureEnd
    from rlds_reverb.transform.mixture import MixtureLevel as MixtureLevel
    from rlds_reverb.transform.mixture import SizeWeighting as SizeWeighting
    from rlds_reverb.transform.mixture import mix_datasets as mix_datasets
    from rlds_reverb.transform.normalize import FieldNormalization as FieldNormalization
    from rlds_reverb.transform.normalize import NormalizationMode as NormalizationMode
    from rlds_reverb.transform.normalize import Normalizer as Normalizer
    from rlds_reverb.transform.normalize import normalize as normalize
    from rlds_reverb.transform.normalize import unnormalize as unnormalize
    from rlds_reverb.write import observers as observers
    from rlds_reverb.write.options import PushOptions as PushOptions
    from rlds_reverb.write.push import PushStats as PushStats
    from rlds_reverb.write.push import push as push
    from rlds_reverb.write.push import push_rlds_to_reverb as push_rlds_to_reverb
    from rlds_reverb.write.seed import seed_server as seed_server


if not TYPE_CHECKING:  # Type checkers see the static names above; a typo stays an error.

    def __getattr__(name: str) -> Any:
        """Imports a public name on first use (PEP 562) and caches it in the module."""
        target = _EXPORTS.get(name)
        if target is None:
            raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
        module_name, _, attribute = target.partition(':')
        value = importlib.import_module(module_name)
        if attribute:
            value = getattr(value, attribute)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_EXPORTS))
