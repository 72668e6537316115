"""Typed use of the public API: `make lint` type-checks this file with mypy (mypy.ini).

Never run, only checked: it holds what a user writes, so that the names resolve through
`import rlds_reverb` for type checkers and IDEs (not only through the lazy `__getattr__`)
and their types are the real ones. The `# type: ignore[...]` lines are mistakes the checker
must catch; `warn_unused_ignores` fails the check when one stops being caught (for example
when a name degrades to `Any`).
"""

from __future__ import annotations

import adders
import rlds_reverb
from rlds_reverb import checkpoints, items, observers, priorities, sampling, tables


def push_two_ways(address: str, observer: observers.ReverbAddTrajectoryObserver) -> int:
    """Loads a dataset, validates it and pushes it: the README's first steps, typed."""
    episodes = rlds_reverb.load('/data/cartpole', split='train[:10]')
    load_options = rlds_reverb.LoadOptions(split='train[:10]', step_fields=['observation'])
    episodes = rlds_reverb.load('/data/cartpole', options=load_options)
    report: rlds_reverb.ValidationReport = rlds_reverb.validate(episodes, on_invalid='skip')
    if not report.ok:
        print(report.format())
    stats: rlds_reverb.PushStats = rlds_reverb.push(
        episodes, address, 'replay', item=rlds_reverb.items.TwoStep(), priority=1.0
    )
    stats = stats.merge(rlds_reverb.push(episodes, address, ['a', 'b'], item=items.NStep(3, 0.99)))
    options = rlds_reverb.PushOptions(item=items.NStep(3, 0.99), priority=1.0)
    stats = stats.merge(rlds_reverb.push(episodes, address, 'replay', options=options))
    rlds_reverb.push_rlds_to_reverb(episodes, observer)
    wrong: int = rlds_reverb.push(episodes, address, 'replay')  # type: ignore[assignment]
    del wrong
    return stats.episodes + sum(stats.items.values())


def name_item_kinds() -> list[items.ItemKind]:
    """Every item kind, from the short module name and through the package."""
    return [
        items.TwoStep(),
        items.NStep(3, 0.99),
        rlds_reverb.items.Sequence(40, 20, end='pad'),
        items.Episode(1000, overflow=items.EpisodeOverflow.SPLIT),
    ]


def make_tables() -> list[object]:
    """Table presets from `rlds_reverb.tables`."""
    return [
        tables.uniform('replay', max_size=1000),
        tables.prioritized('prioritized', priority_exponent=0.6, max_size=1000),
        tables.fifo_queue('queue', max_size=100),
    ]


def convert(directory: str) -> None:
    """The TF-Agents drop-in and the adders."""
    episodes = rlds_reverb.load(directory)
    rlds_reverb.convert_rlds_to_trajectories(episodes, on_invalid=rlds_reverb.ValidationMode.SKIP)
    episodes.apply(adders.n_step(3, 0.99)).apply(adders.sequences(64))
    rlds_reverb.create_trajectory_data_spec(episodes)
    fields: list[str] = rlds_reverb.get_rlds_step_features()
    del fields


def keep_frames_encoded(directory: str) -> None:
    """Camera frames kept encoded: the fields, the formats, the image ops."""
    fields: dict[str, rlds_reverb.FrameFormat] = rlds_reverb.list_frame_fields(directory)
    episodes = rlds_reverb.load(directory, encoded_frames=list(fields))
    decoded = episodes.apply(
        rlds_reverb.frames.decode_frames(sizes={'observation/image': (64, 64)})
    )
    decoded.apply(rlds_reverb.frames.crop_frames({'observation/image': (56, 56)}, mode='random'))
    try:
        rlds_reverb.convert_rlds_to_trajectories(episodes, decode_frames=['observation/image'])
    except rlds_reverb.FrameFieldError as error:
        print(error)


def shuffle_within_a_budget(directory: str) -> float:
    """Steps shuffled within a memory budget in bytes, and the order's rank correlation."""
    stats = rlds_reverb.ShuffleStats()
    steps = rlds_reverb.shuffle_within_budget(
        rlds_reverb.load(directory, encoded_frames='all'),
        memory_budget_bytes=2**30,
        seed=0,
        unit=rlds_reverb.ShuffleUnit.STEPS,
        stats=stats,
    )
    for _ in steps.take(10):
        pass
    return stats.rank_correlation()


def handle_errors(directory: str) -> str:
    """The exceptions are classes of the package's hierarchy."""
    try:
        rlds_reverb.load(directory)
    except rlds_reverb.SourceNotFoundError as error:
        base: rlds_reverb.SourceError = error
        return str(base)
    except rlds_reverb.InvalidEpisodeError as error:
        return f'{error.episode_index}: {len(error.problems)}'
    except rlds_reverb.SpecMismatchError as error:
        return '\n'.join(error.differences)
    except rlds_reverb.ExportError as error:
        return str(error)
    except rlds_reverb.PushError as error:
        written: int = error.episodes_written
        return str(written)
    except (
        rlds_reverb.CheckpointError,
        rlds_reverb.D4rlFileError,
        rlds_reverb.DistributedPushError,
        rlds_reverb.EmptyTableError,
        rlds_reverb.EpisodeTooLongError,
        rlds_reverb.LeRobotExportError,
        rlds_reverb.LeRobotFormatError,
        rlds_reverb.MinariFormatError,
        rlds_reverb.ResumeError,
        rlds_reverb.ReverbConnectionError,
        rlds_reverb.ReverbTimeoutError,
        rlds_reverb.TableError,
        rlds_reverb.TableTooSmallError,
    ) as error:
        return str(error)
    except rlds_reverb.RldsReverbError as error:
        return str(error)
    return rlds_reverb.__version__


def use_the_other_modules(address: str, directory: str) -> list[object]:
    """The remaining short module names and public names resolve."""
    checkpoints.find_latest_checkpoint(directory)
    rlds_reverb.export_table(directory, 'replay', server=address)
    export_options = rlds_reverb.ExportOptions(on_invalid='skip')
    rlds_reverb.export_table(directory, 'replay', checkpoint=directory, options=export_options)
    rlds_reverb.seed_server(rlds_reverb.load(directory), table='replay')
    saved = rlds_reverb.save_as_rlds(directory, f'{directory}_copy/1.0.0', episodes_per_shard=10)
    print(f'{saved.episodes} episodes, {saved.steps_per_second:.0f} steps/s')
    written = rlds_reverb.save_as_lerobot(
        directory, f'{directory}_lerobot', fps=10, cameras=rlds_reverb.CameraMode.VIDEO
    )
    psnr: dict[str, float] = written.psnr_db
    found = rlds_reverb.read_lerobot_metadata(rlds_reverb.load(f'{directory}_lerobot'))
    print(f'{written.frames_per_second:.0f} frames/s, {psnr}, {found and found.names}')
    missing = rlds_reverb.no_such_name  # type: ignore[attr-defined]
    return [
        missing,
        priorities.linear_beta_schedule,
        sampling.LearnerDataset,
        observers.ReverbAddTrajectoryObserver,
        rlds_reverb.RldsRecorder,
        rlds_reverb.push_with_beam,
        rlds_reverb.EndBehavior.PAD,
        rlds_reverb.register_reader,
    ]


def write_a_report(directory: str) -> int:
    """The dataset report: one HTML page, and the figures it shows."""
    found = rlds_reverb.write_report(rlds_reverb.load(directory), 'report.html', title='x')
    episodes: int = found.stats.episodes
    valid: bool = found.validation.ok
    wrong: str = rlds_reverb.write_report(  # type: ignore[assignment]
        rlds_reverb.load(directory), 'report.html'
    )
    del wrong
    return episodes + int(valid)


def watch_a_server(address: str) -> str:
    """A running server's tables: sizes, counters and opt-in priorities, typed."""
    snapshot: rlds_reverb.ServerStatus = rlds_reverb.fetch_server_status(
        address, timeout_ms=5_000, priority_samples=100
    )
    replay = snapshot.table('replay')
    fill: float = replay.size / replay.max_size
    mean = replay.priorities.mean if replay.priorities else None
    wrong: str = replay.inserts  # type: ignore[assignment]
    del wrong
    return f'{snapshot.format()}\n{fill:.0%} {mean} {snapshot.to_json()["address"]}'


def sample(address: str) -> None:
    """The learner dataset, from the package."""
    spec = rlds_reverb.tables.signature_for(items.TwoStep(), rlds_reverb.load('/data'))
    learner = rlds_reverb.LearnerDataset(address, 'replay', data_spec=spec, batch_size=32)
    batch: rlds_reverb.SampleBatch = next(iter(learner.as_dataset()))
    del batch
    options = rlds_reverb.SamplingOptions(batch_size=32, beta=0.4)
    mixed = rlds_reverb.LearnerDataset(address, 'replay', data_spec=spec, options=options)
    mixed.stop()


def normalize_with_statistics(directory: str) -> float:
    """Statistics saved beside the data, and normalization with them."""
    statistics: rlds_reverb.DatasetStatistics = rlds_reverb.ensure_statistics(
        directory, quantiles=[0.01, 0.99]
    )
    q99: float = float(statistics['action'].get_quantile(0.99)[0])
    fields = {
        'action': rlds_reverb.FieldNormalization(
            mode=rlds_reverb.NormalizationMode.QUANTILES, mask=[True] * 6 + [False]
        ),
        'observation/state': 'mean_std',
    }
    episodes = rlds_reverb.load(directory).apply(rlds_reverb.normalize(statistics, fields))
    back = episodes.apply(rlds_reverb.unnormalize(statistics, fields))
    normalizer = rlds_reverb.Normalizer(statistics, fields)
    del back, normalizer
    wrong: str = rlds_reverb.compute_statistics(episodes)  # type: ignore[assignment]
    del wrong
    with_beam: rlds_reverb.DatasetStatistics = rlds_reverb.compute_statistics_with_beam(
        directory, pipeline_options=['--runner=DirectRunner']
    )
    return q99 + float(with_beam.steps)


def mix_two_datasets(bridge: str, kitchen: str) -> dict[str, int]:
    """Mixes two datasets by weight, one brought to the other's spec; counts the draws."""
    mapping = rlds_reverb.FieldMapping(rename={'observation/proprio': 'observation/state'})
    mixture: rlds_reverb.Mixture = rlds_reverb.mix_datasets(
        {'bridge': rlds_reverb.load(bridge), 'kitchen': kitchen},
        weights={'bridge': 0.7, 'kitchen': 0.3},
        seed=0,
        level=rlds_reverb.MixtureLevel.STEP,
        mappings={'kitchen': mapping},
        weight_by_size=rlds_reverb.SizeWeighting.EPISODES,
        on_end=rlds_reverb.MixtureEnd.STOP,
    )
    wrong: str = mixture.count_choices(10)  # type: ignore[assignment]
    del wrong
    return mixture.count_choices(100_000)
