"""What a Beam push wrote: per server, in total, and what its workers read.

`rlds_reverb.distribute.pipeline.push_with_beam` returns a `BeamPushResult`: the counts each
writer planned (`ServerCounts`), with what each server reports, and the Beam counters of
what the workers read (`ReadCounts`).
"""

from __future__ import annotations

import dataclasses

from rlds_reverb.distribute import routing

__all__ = [
    'BeamPushResult',
    'ReadCounts',
    'ServerCounts',
]


@dataclasses.dataclass
class ServerCounts:
    """What one server got: episodes, steps, items, skipped episodes; what it reports.

    `inserted` is the table's insert count after the pipeline, as the server reports it;
    `inserted_before` the count before. After a successful push, `inserted == items`.
    """

    address: str
    episodes: int = 0
    steps: int = 0
    items: int = 0
    skipped_episodes: int = 0
    inserted: int = 0
    inserted_before: int = 0


@dataclasses.dataclass
class ReadCounts:
    """What the pipeline's workers read, summed from its Beam counters.

    Attributes:
      records_scanned: Records the count stage parsed from their bytes in bulk (steps not
        decoded: lengths, flags, rewards and discounts read as plain numbers).
      decoded_to_count: Episodes the count stage decoded (those the bulk scan found invalid
        or could not decide; every episode of a dataset it cannot scan, such as images).
      decoded_to_write: Episodes the writers decoded, each writer its own index range.
    """

    records_scanned: int = 0
    decoded_to_count: int = 0
    decoded_to_write: int = 0

    @property
    def decoded(self) -> int:
        """Episodes decoded by every worker together."""
        return self.decoded_to_count + self.decoded_to_write


@dataclasses.dataclass
class BeamPushResult:
    """What a Beam push wrote, per server and in total.

    `reads` is what the workers read (`ReadCounts`), None when the runner reports no metrics.
    """

    table: str
    servers: list[ServerCounts]
    seconds: float = 0.0
    reads: ReadCounts | None = None

    @property
    def episodes(self) -> int:
        return sum(s.episodes for s in self.servers)

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.servers)

    @property
    def items(self) -> int:
        return sum(s.items for s in self.servers)

    @property
    def skipped_episodes(self) -> int:
        return sum(s.skipped_episodes for s in self.servers)

    @property
    def spread(self) -> float:
        """The largest server's items over the mean, minus one (0.0: perfectly even)."""
        return routing.compute_spread([s.items for s in self.servers])

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def format(self) -> str:
        """Returns one line per server and a total line."""
        lines = [
            f'  {s.address}: {s.episodes} episodes, {s.steps} steps, {s.items} items, '
            f'{s.skipped_episodes} skipped (the server reports {s.inserted} inserted)'
            for s in self.servers
        ]
        lines.append(
            f'Pushed {self.items} items ({self.episodes} episodes, {self.steps} steps, '
            f'{self.skipped_episodes} skipped) into {self.table!r} on {len(self.servers)} '
            f'server(s) in {self.seconds:.2f} s; '
            + routing.describe_spread([s.items for s in self.servers])
            + '.'
        )
        return '\n'.join(lines)
