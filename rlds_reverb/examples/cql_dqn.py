"""An offline TF-Agents learner fed only from Reverb: conservative double DQN with PER.

The agent is `CqlDqnAgent`, a TF-Agents `DdqnAgent` whose loss adds the discrete CQL
penalty (Kumar et al., 2020) to the importance-weighted TD loss:

    L = mean_i w_i · huber(δ_i) + α · mean_i w_i · (logsumexp_a Q(s_i, a) − Q(s_i, a_i)),
    δ_i = R_i + γ · D_i · Q_target(s'_i, argmax_a Q(s'_i, a)) − Q(s_i, a_i),

with (R_i, D_i) the n-step return and discount of item i (docs/semantics.md §4) and w_i its
importance weight (`rlds_reverb.learn.priorities`). The penalty pushes down the Q-values of
actions the data never took, which keeps the greedy policy inside the data's support: the
cure for the swings of plain offline DQN on mixed-quality data. Target networks follow by
Polyak averaging (τ per step). Each train step samples a prioritized batch from Reverb,
trains, and sends |δ_i| + ε back as the items' new priorities.

Items are n-step transitions (`items.NStep(n, gamma)`): `observation`, `action`,
`n_step_return`, `n_step_discount`, `next_observation`, `n_step_length`;
`items_to_transitions` makes the TF-Agents `Transition`s the agent trains on.

Example:
  >>> agent = build_agent(config, observation_spec=obs_spec, action_spec=action_spec)
  >>> history = train(agent, learner_dataset, config)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from adders import transitions
from rlds_reverb.core import checks, types
from rlds_reverb.learn import sampling

__all__ = [
    'CqlDqnAgent',
    'LearnerConfig',
    'TrainHistory',
    'build_agent',
    'evaluate_policy',
    'items_to_transitions',
    'make_eval_env',
    'make_train_step',
    'record_priorities',
    'train',
]


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """The training recipe (the defaults are the measured demo recipe).

    Attributes:
      num_iterations: Train steps.
      batch_size: Items per batch.
      n_step: Steps per transition (1: ordinary transitions).
      gamma: The discount factor.
      learning_rate: Adam's learning rate.
      fc_layer_params: Hidden layer sizes of the Q-network.
      cql_alpha: Weight α of the CQL penalty (0: plain double DQN).
      target_update_tau: Polyak factor τ of the target network, applied every step.
      priority_exponent: α of the prioritized table (P ∝ priority^α).
      priority_epsilon: ε in priority = |δ| + ε.
      beta_start: β of the importance weights at step 0, annealed linearly ...
      beta_end: ... to this value at the last iteration.
      eval_interval: Iterations between evaluations (0: only those of `eval_schedule`).
      eval_schedule: More iterations to evaluate after, denser where learning is fast;
        0 evaluates the untrained policy. Those beyond `num_iterations` are skipped.
      eval_episodes: Episodes per evaluation during training.
      seed: Seeds TensorFlow (network initialization).
    """

    num_iterations: int = 5_000
    batch_size: int = 256
    n_step: int = 1
    gamma: float = 0.99
    learning_rate: float = 3e-4
    fc_layer_params: tuple[int, ...] = (64, 64)
    cql_alpha: float = 1.0
    target_update_tau: float = 0.005
    priority_exponent: float = 0.6
    priority_epsilon: float = 1e-3
    beta_start: float = 0.4
    beta_end: float = 1.0
    eval_interval: int = 1_000
    eval_schedule: tuple[int, ...] = (0, 25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750)
    eval_episodes: int = 5
    seed: int = 0


class CqlDqnAgent(dqn_agent.DdqnAgent):
    """A TF-Agents double DQN agent with the discrete CQL penalty added to its loss.

    Args:
      *args: `DdqnAgent`'s arguments.
      cql_alpha: Weight α >= 0 of α · (logsumexp_a Q(s, a) − Q(s, a_data)).
      **kwargs: `DdqnAgent`'s keyword arguments.

    Raises:
      ValueError: If `cql_alpha` is negative.

    Example:
      >>> agent = CqlDqnAgent(time_step_spec, action_spec, q_network=net,
      ...                     optimizer=tf.keras.optimizers.Adam(3e-4), cql_alpha=1.0)
    """

    def __init__(self, *args, cql_alpha: float = 1.0, **kwargs):
        if not cql_alpha >= 0:
            raise ValueError(f'cql_alpha={cql_alpha!r} must be >= 0.')
        super().__init__(*args, **kwargs)
        self._cql_alpha = float(cql_alpha)

    def compute_cql_penalty(self, experience, *, weights=None, training=False) -> tf.Tensor:
        """Returns mean_i w_i · (logsumexp_a Q(s_i, a) − Q(s_i, a_i)).

        Example:
          >>> penalty = agent.compute_cql_penalty(experience, weights=weights)
        """
        time_steps, policy_steps, _ = self._as_transition(experience)
        q_values, _ = self._q_network(
            time_steps.observation, step_type=time_steps.step_type, training=training
        )
        taken = common.index_with_actions(q_values, tf.cast(policy_steps.action, tf.int32))
        gap = tf.reduce_logsumexp(q_values, axis=-1) - taken
        return common.aggregate_losses(per_example_loss=gap, sample_weight=weights).total_loss

    def _loss(self, experience, weights=None, training=False, **kwargs):
        loss_info = super()._loss(experience, weights=weights, training=training, **kwargs)
        if self._cql_alpha == 0.0:
            return loss_info
        penalty = self.compute_cql_penalty(experience, weights=weights, training=training)
        return loss_info._replace(loss=loss_info.loss + self._cql_alpha * penalty)


def build_agent(
    config: LearnerConfig,
    *,
    observation_spec: tf.TensorSpec,
    action_spec: tensor_spec.BoundedTensorSpec,
) -> CqlDqnAgent:
    """Returns an initialized `CqlDqnAgent` for `config`.

    Args:
      config: The recipe.
      observation_spec: The spec of one observation.
      action_spec: A scalar bounded integer spec of the discrete actions.

    Returns:
      The agent, its train step counter at 0.

    Example:
      >>> agent = build_agent(LearnerConfig(), observation_spec=obs_spec, action_spec=act_spec)
    """
    tf.random.set_seed(config.seed)
    network = q_network.QNetwork(
        observation_spec, action_spec, fc_layer_params=tuple(config.fc_layer_params)
    )
    agent = CqlDqnAgent(
        ts.time_step_spec(observation_spec),
        action_spec,
        q_network=network,
        optimizer=tf.keras.optimizers.Adam(config.learning_rate),
        gamma=config.gamma,
        target_update_tau=config.target_update_tau,
        target_update_period=1,
        td_errors_loss_fn=common.element_wise_huber_loss,
        cql_alpha=config.cql_alpha,
        train_step_counter=tf.Variable(0, dtype=tf.int64, name='train_step'),
    )
    agent.initialize()
    return agent


def items_to_transitions(items: dict) -> trajectory.Transition:
    """Returns the TF-Agents `Transition`s of a batch of n-step items (`[B, ...]` leaves).

    Built by `adders.transitions.make_n_step_transitions`, as `adders.to_dqn_transitions`
    builds them from episodes: `DqnAgent`'s target R + γ · D · Q(o') is the n-step target.

    Example:
      >>> experience = items_to_transitions(batch_of_n_step_items)
    """
    return transitions.make_n_step_transitions(
        items[types.OBSERVATION],
        items[types.ACTION],
        items[types.N_STEP_RETURN],
        items[types.N_STEP_DISCOUNT],
        items[types.NEXT_OBSERVATION],
    )


@dataclasses.dataclass
class TrainHistory:
    """What `train` records: losses per iteration, evaluations, last priorities sent.

    `seconds` is the whole run's wall time, `eval_seconds` the part spent evaluating.
    """

    losses: list[float] = dataclasses.field(default_factory=list)
    eval_iterations: list[int] = dataclasses.field(default_factory=list)
    eval_returns: list[float] = dataclasses.field(default_factory=list)
    last_priorities: dict[int, float] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    eval_seconds: float = 0.0


def make_train_step(
    agent: CqlDqnAgent, learner: sampling.LearnerDataset, config: LearnerConfig
) -> Callable:
    """Returns a `tf.function` doing one step: sample, train with weights, update priorities.

    It takes the batch iterator and returns `(loss, keys, priorities)`.

    Example:
      >>> loss, keys, priorities = make_train_step(agent, learner, config)(iterator)
    """

    @tf.function
    def train_step(iterator):
        batch = next(iterator)
        loss_info = agent.train(batch.experience, weights=batch.weights)
        td_errors = loss_info.extra.td_error
        learner.update_priorities(
            batch.info.key,
            td_errors,
            table_index=batch.table_index,
            server_index=batch.server_index,
            epsilon=config.priority_epsilon,
        )
        priorities = tf.abs(tf.cast(td_errors, tf.float64)) + config.priority_epsilon
        return loss_info.loss, batch.info.key, priorities

    return train_step


def make_eval_env(env_name: str = 'CartPole-v1'):
    """Returns the TF-Agents py environment `suite_gym.load(env_name)` (gym 0.23).

    Example:
      >>> env = make_eval_env('CartPole-v1')
    """
    from tf_agents.environments import suite_gym  # Imported late: gym warns on import.

    return suite_gym.load(env_name)


def evaluate_policy(
    policy, *, num_episodes: int = 10, seed: int = 0, env_name: str = 'CartPole-v1'
) -> float:
    """Returns the average undiscounted return of `policy` over `num_episodes` episodes.

    The episodes run side by side, one environment each, so that the policy acts on a
    batch of observations per step: an evaluation costs about as many policy calls as its
    longest episode has steps, whatever `num_episodes` is.

    Args:
      policy: A TF-Agents TF policy (for example `agent.policy`, greedy for DQN).
      num_episodes: Episodes to run (> 0).
      seed: Seeds the environments; episode k resets with `seed + k`.
      env_name: The gym environment id.

    Returns:
      The mean return.

    Raises:
      ValueError: If `num_episodes` < 1.

    Example:
      >>> evaluate_policy(agent.policy, num_episodes=10)
    """
    from tf_agents.environments import batched_py_environment
    from tf_agents.policies import py_tf_eager_policy

    checks.check_int_at_least(num_episodes, 1, argument='num_episodes')
    envs = [make_eval_env(env_name) for _ in range(num_episodes)]
    for episode, env in enumerate(envs):
        env.seed(seed + episode)
    batched = batched_py_environment.BatchedPyEnvironment(envs, multithreading=False)
    eager = py_tf_eager_policy.PyTFEagerPolicy(policy, use_tf_function=True, batch_time_steps=False)
    returns = np.zeros(num_episodes)
    running = np.ones(num_episodes, bool)
    try:
        time_step = batched.reset()
        while running.any():
            time_step = batched.step(np.asarray(eager.action(time_step).action))
            # An environment stepped after its last step starts a new episode: not counted.
            returns += np.where(running, time_step.reward, 0.0)
            running &= ~time_step.is_last()
    finally:
        batched.close()
    return float(np.mean(returns))


def record_priorities(history: TrainHistory, keys: np.ndarray, priorities: np.ndarray) -> None:
    """Remembers the last priority sent for each key.

    Example:
      >>> record_priorities(history, keys.numpy(), priorities.numpy())
    """
    history.last_priorities.update(zip(keys.tolist(), priorities.tolist(), strict=True))


def train(
    agent: CqlDqnAgent,
    learner: sampling.LearnerDataset,
    config: LearnerConfig,
    *,
    progress: bool = True,
    eval_fn: Callable[[], float] | None = None,
) -> TrainHistory:
    """Trains `agent` for `config.num_iterations` steps on batches from `learner`.

    Args:
      agent: The agent (`build_agent`).
      learner: The learner dataset of n-step items, with `items_to_transitions` as its
        `experience_fn`.
      config: The recipe.
      progress: Whether to show a tqdm progress bar of the iterations.
      eval_fn: Called before the first iteration if `config.eval_schedule` holds 0, after
        every iteration in it, every `config.eval_interval` iterations and after the last
        one; returns the evaluation return (None: no evaluation).

    Returns:
      The `TrainHistory`.

    Raises:
      ValueError: If `config.eval_schedule` holds a negative iteration.

    Example:
      >>> history = train(agent, learner, config, eval_fn=lambda: evaluate_policy(agent.policy))
    """
    from tqdm.auto import tqdm

    for index, at in enumerate(config.eval_schedule):
        checks.check_int_at_least(at, 0, argument=f'eval_schedule[{index}]')
    scheduled = set(config.eval_schedule)
    history = TrainHistory()
    train_step = make_train_step(agent, learner, config)
    iterator = iter(learner.as_dataset())
    started = time.perf_counter()

    def evaluate(iteration: int, eval_fn: Callable[[], float]) -> None:
        begun = time.perf_counter()
        history.eval_iterations.append(iteration)
        history.eval_returns.append(eval_fn())
        history.eval_seconds += time.perf_counter() - begun

    if eval_fn is not None and 0 in scheduled:
        evaluate(0, eval_fn)
    bar = tqdm(range(1, config.num_iterations + 1), desc='train', disable=not progress)
    for iteration in bar:
        loss, keys, priorities = train_step(iterator)
        history.losses.append(float(loss))
        record_priorities(history, keys.numpy(), priorities.numpy())
        last = iteration == config.num_iterations
        due = iteration in scheduled or (
            config.eval_interval and iteration % config.eval_interval == 0
        )
        if eval_fn is not None and (due or last):
            evaluate(iteration, eval_fn)
            bar.set_postfix(loss=f'{float(loss):.3f}', eval_return=history.eval_returns[-1])
    history.seconds = time.perf_counter() - started
    return history
