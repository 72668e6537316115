"""The `rlds-reverb demo` job: offline CQL-DQN on the embedded CartPole RLDS dataset.

1. Builds the embedded CartPole-v1 RLDS dataset if missing (`datasets.cartpole`: 250
   episodes of a scripted controller with 0-80% random actions per episode).
2. Validates every episode.
3. Seeds a prioritized Reverb table (priority exponent 0.6) with 1-step transitions
   (`items.NStep(1, 0.99)`: the flags decide termination, so a terminal episode does not
   bootstrap from its last observation), every item at priority 1. With `num_servers=N`
   it starts N local servers, each seeded with every N-th episode: one logical table.
4. Trains `learner.CqlDqnAgent` (TF-Agents double DQN plus the CQL penalty) offline, only
   from Reverb: prioritized batches (from every server, in proportion to their sizes),
   importance weights with β annealed 0.4 -> 1, and priorities |δ| + ε sent back after
   every step (each to the server its sample came from). The greedy policy is evaluated
   (5 episodes) before the first step, densely over the first few hundred iterations, where
   it rises from the untrained policy's return, then every 1,000: the learning curve.
5. Evaluates the final greedy policy in CartPole-v1 for 10 episodes.
6. Prints its average return next to the behaviour policy's average return in the dataset.
7. Saves a PNG of the learning curve against the behaviour policy's return, the loss and
   the priority distribution; `summary.json` holds the curve and both returns.

Example:
  >>> summary = run_demo(quick=True)
  >>> summary['eval_return'], summary['behaviour_return']
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import reverb
import tensorflow as tf
from tf_agents.specs import tensor_spec

from rlds_reverb.check import validation
from rlds_reverb.core import checks, files, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.examples import cartpole, plots
from rlds_reverb.examples import cql_dqn as learner
from rlds_reverb.learn import priorities, sampling
from rlds_reverb.read import loading
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import seed

__all__ = [
    'DEFAULT_OUTPUT_DIR',
    'ENV_NAME',
    'FINAL_EVAL_EPISODES',
    'PLOT_NAME',
    'QUICK_EVAL_INTERVAL',
    'QUICK_ITERATIONS',
    'SUMMARY_NAME',
    'TABLE',
    'compute_behaviour_return',
    'format_curve',
    'make_action_spec',
    'make_config',
    'make_learner_dataset',
    'run_demo',
    'save_summary',
    'seed_table',
    'seed_tables',
]

TABLE = 'replay'
ENV_NAME = 'CartPole-v1'
FINAL_EVAL_EPISODES = 10
DEFAULT_OUTPUT_DIR = 'rlds_reverb_demo'
PLOT_NAME = 'offline_learner.png'
SUMMARY_NAME = 'summary.json'
# The short run of `--quick` (smoke tests, notebook): same pipeline, fewer iterations.
QUICK_ITERATIONS = 300
QUICK_EVAL_INTERVAL = 100


def make_config(*, quick: bool, seed: int) -> learner.LearnerConfig:
    """Returns the demo recipe, or its short `--quick` version.

    Example:
      >>> config = make_config(quick=True, seed=0)
    """
    config = learner.LearnerConfig(seed=seed)
    if quick:
        config = dataclasses.replace(
            config, num_iterations=QUICK_ITERATIONS, eval_interval=QUICK_EVAL_INTERVAL
        )
    return config


def compute_behaviour_return(episodes: tf.data.Dataset) -> float:
    """Returns the average episode return (sum of rewards) of an RLDS dataset.

    Example:
      >>> compute_behaviour_return(rlds_reverb.load(path))
    """
    returns = episodes_lib.to_episode_tensors(episodes).map(
        lambda steps: tf.reduce_sum(steps[types.REWARD])
    )
    values = [float(r) for r in returns.as_numpy_iterator()]
    return sum(values) / max(1, len(values))


def format_curve(summary: dict[str, Any]) -> str:
    """Returns the learning curve of a demo summary as one line, `iteration: return` pairs.

    Example:
      >>> format_curve({'eval_iterations': [0, 25], 'eval_returns': [9.3, 84.0]})
      'learning curve (iteration: return): 0: 9, 25: 84'
    """
    pairs = zip(summary['eval_iterations'], summary['eval_returns'], strict=True)
    return 'learning curve (iteration: return): ' + ', '.join(
        f'{iteration}: {value:.0f}' for iteration, value in pairs
    )


def make_action_spec(signature: types.SpecNest) -> tensor_spec.BoundedTensorSpec:
    """Returns the agent's action spec: the data's action dtype, the env's action range.

    Example:
      >>> action_spec = make_action_spec(signature)
    """
    env_spec = learner.make_eval_env(ENV_NAME).action_spec()
    return tensor_spec.BoundedTensorSpec(
        [], signature[types.ACTION].dtype, env_spec.minimum, env_spec.maximum, name='action'
    )


def seed_table(episodes: tf.data.Dataset, config: learner.LearnerConfig, *, num_steps: int):
    """Starts a server with one prioritized table of the n-step items, every priority 1.

    Returns:
      `(server, client, signature, number of items)`.

    Example:
      >>> server, client, signature, num_items = seed_table(episodes, config, num_steps=n)
    """
    item = items.NStep(config.n_step, config.gamma)
    result = seed.seed_server(
        episodes,
        table=TABLE,
        preset=tables.TablePreset.PRIORITIZED,
        item=item,
        max_size=num_steps,
        priority_exponent=config.priority_exponent,
        priority=1.0,
    )
    client = reverb.Client(result.address)
    return result.server, client, tables.signature_for(item, episodes), result.items


def seed_tables(
    episodes: tf.data.Dataset, config: learner.LearnerConfig, *, num_steps: int, num_servers: int
) -> tuple[list[reverb.Server], list[str], types.SpecNest, list[int]]:
    """Starts `num_servers` local servers; server k holds the items of episodes k, k + N, ...

    Returns:
      `(servers, addresses, signature, items per server)`.

    Raises:
      ValueError: If `num_servers` < 1.
      Anything `seed_server` raises, after stopping the servers started so far.

    Example:
      >>> servers, addresses, signature, counts = seed_tables(episodes, config,
      ...                                                     num_steps=n, num_servers=2)
    """
    checks.check_int_at_least(num_servers, 1, argument='num_servers')
    item = items.NStep(config.n_step, config.gamma)
    results = []
    try:
        for shard in range(num_servers):
            part = episodes if num_servers == 1 else episodes.shard(num_servers, shard)
            results.append(
                seed.seed_server(
                    part,
                    table=TABLE,
                    preset=tables.TablePreset.PRIORITIZED,
                    item=item,
                    max_size=num_steps,
                    priority_exponent=config.priority_exponent,
                    priority=1.0,
                )
            )
        signature = tables.signature_for(item, episodes)
    except BaseException:  # Ctrl-C too: no server outlives the demo.
        for result in results:
            result.server.stop()
        raise
    return (
        [r.server for r in results],
        [r.address for r in results],
        signature,
        [r.items for r in results],
    )


def make_learner_dataset(
    server: reverb.Client | str | list[str],
    signature: types.SpecNest,
    agent,
    config: learner.LearnerConfig,
) -> sampling.LearnerDataset:
    """Returns the prioritized learner dataset, β annealed over the whole run.

    Args:
      server: A client, an address, or the addresses of several servers holding the table.
      signature: The item signature.
      agent: The agent (its train step counter drives β).
      config: The recipe.

    Example:
      >>> learner_dataset = make_learner_dataset(client, signature, agent, config)
    """
    beta = priorities.linear_beta_schedule(
        agent.train_step_counter,
        start=config.beta_start,
        end=config.beta_end,
        num_steps=config.num_iterations,
    )
    address = server.server_address if isinstance(server, reverb.Client) else server
    return sampling.LearnerDataset(
        address,
        TABLE,
        data_spec=signature,
        sequence_length=None,
        batch_size=config.batch_size,
        beta=beta,
        experience_fn=learner.items_to_transitions,
    )


def _say(message: str, *, verbose: bool, started: float) -> None:
    if verbose:
        print(f'{message} [{time.perf_counter() - started:.0f} s]', flush=True)


def _seed_and_train(
    episodes: tf.data.Dataset,
    config: learner.LearnerConfig,
    *,
    num_steps: int,
    num_servers: int,
    seed: int,
    say: Callable[[str], None],
    verbose: bool,
) -> tuple[learner.CqlDqnAgent, learner.TrainHistory, list[int]]:
    """Steps 3 and 4: seeds the servers, trains from them; returns (agent, history, counts)."""
    servers, addresses, signature, counts = seed_tables(
        episodes, config, num_steps=num_steps, num_servers=num_servers
    )
    try:  # From here on the servers stop on any way out, Ctrl-C included.
        where = (
            '' if num_servers == 1 else f' on {num_servers} servers ({", ".join(map(str, counts))})'
        )
        say(f'[3/7] seeded prioritized table {TABLE!r} with {sum(counts)} items{where}')
        agent = learner.build_agent(
            config,
            observation_spec=signature[types.OBSERVATION],
            action_spec=make_action_spec(signature),
        )
        dataset = make_learner_dataset(addresses, signature, agent, config)
        say(f'[4/7] training {config.num_iterations} iterations')
        with warnings.catch_warnings():
            # AutoGraph's conversion of TF-Agents code trips Python's `is` literal warning.
            warnings.simplefilter('ignore', SyntaxWarning)
            history = learner.train(
                agent,
                dataset,
                config,
                progress=verbose,
                eval_fn=lambda: learner.evaluate_policy(
                    agent.policy, num_episodes=config.eval_episodes, seed=seed + 1000
                ),
            )
    finally:
        for server in servers:
            server.stop()
    return agent, history, counts


def run_demo(
    *,
    quick: bool = False,
    data_dir: os.PathLike | str | None = None,
    output_dir: os.PathLike | str = DEFAULT_OUTPUT_DIR,
    seed: int = 0,
    verbose: bool = True,
    config: learner.LearnerConfig | None = None,
    num_servers: int = 1,
) -> dict[str, Any]:
    """Runs the demo (see the module docstring) and returns its figures.

    Args:
      quick: Run the short version (a few hundred iterations) for smoke tests.
      data_dir: Where the CartPole dataset lives or is built (`cartpole.default_data_dir()`
        if None).
      output_dir: Where the plot and `summary.json` go.
      seed: Seeds the network initialization and the evaluation episodes.
      verbose: Print progress (steps and a progress bar) and the result.
      config: Overrides the recipe (`make_config(quick=..., seed=...)` if None).
      num_servers: Local Reverb servers to start; the episodes are split between them and
        the learner samples all of them as one table.

    Returns:
      A JSON-able dict (also written to `output_dir/summary.json`): `eval_return` (the
      final greedy policy, 10 episodes), `behaviour_return` (the dataset's mean return),
      the learning curve as `eval_iterations` (from 0, the untrained policy) and
      `eval_returns` (`config.eval_episodes` episodes each), `num_items`,
      `items_per_server`, `num_iterations`, `train_seconds` (`eval_seconds` of it spent
      evaluating), `total_seconds`, `final_loss`, the `plot` and `dataset` paths and the
      recipe (`config`).

    Raises:
      InvalidEpisodeError: If the dataset holds an invalid episode.
      ValueError: If `num_servers` < 1.

    Example:
      >>> run_demo(quick=True)['eval_return']
    """
    checks.check_int_at_least(num_servers, 1, argument='num_servers')
    started = time.perf_counter()
    say = functools.partial(_say, verbose=verbose, started=started)
    config = config or make_config(quick=quick, seed=seed)
    path = cartpole.ensure_default_dataset(data_dir=data_dir)
    say(f'[1/7] dataset: {path}')
    episodes = loading.load(path)
    report = validation.validate(episodes, on_invalid='raise')
    say(f'[2/7] valid: {report.format()}')
    behaviour = compute_behaviour_return(episodes)
    agent, history, counts = _seed_and_train(
        episodes,
        config,
        num_steps=report.steps,
        num_servers=num_servers,
        seed=seed,
        say=say,
        verbose=verbose,
    )
    final = learner.evaluate_policy(agent.policy, num_episodes=FINAL_EVAL_EPISODES, seed=seed)
    say(f'[5/7] evaluated the final greedy policy on {FINAL_EVAL_EPISODES} episodes')
    untrained = (
        f'; untrained {history.eval_returns[0]:.1f}' if history.eval_iterations[:1] == [0] else ''
    )
    say(
        f'[6/7] average return: learned policy {final:.1f} vs behaviour policy {behaviour:.1f} '
        f'(max 500{untrained})'
    )
    output = pathlib.Path(output_dir)
    plot = plots.plot_training(
        history, behaviour_return=behaviour, final_return=final, path=output / PLOT_NAME
    )
    say(f'[7/7] plot: {plot}')
    summary = {
        'eval_return': final,
        'behaviour_return': behaviour,
        'num_items': sum(counts),
        'items_per_server': counts,
        'num_iterations': config.num_iterations,
        'train_seconds': history.seconds,
        'eval_seconds': history.eval_seconds,
        'total_seconds': time.perf_counter() - started,
        'eval_iterations': history.eval_iterations,
        'eval_returns': history.eval_returns,
        'final_loss': history.losses[-1] if history.losses else None,
        'plot': str(plot),
        'dataset': str(path),
        'config': dataclasses.asdict(config),
    }
    save_summary(summary, output)
    return summary


def save_summary(summary: dict[str, Any], output_dir: os.PathLike | str) -> pathlib.Path:
    """Writes a demo summary as `output_dir/summary.json` (never world-writable).

    Args:
      summary: What `run_demo` returns (JSON-able).
      output_dir: The demo's output directory (created if missing).

    Returns:
      The path written.

    Example:
      >>> save_summary(summary, 'rlds_reverb_demo')
    """
    path = files.make_shared_dirs(output_dir) / SUMMARY_NAME
    with files.replace_file(path, text=True) as out:
        out.write(json.dumps(summary, indent=2))
    return path
