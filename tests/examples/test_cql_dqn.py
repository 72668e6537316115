"""The offline learner: CQL-DQN agent, n-step items to transitions, training from Reverb."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest
import reverb
import tensorflow as tf
from tf_agents.replay_buffers import reverb_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from rlds_reverb.cli import demo_command
from rlds_reverb.core import types
from rlds_reverb.examples import cartpole, demo, plots
from rlds_reverb.examples import cql_dqn as learner
from rlds_reverb.read import loading
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as writers

OBSERVATION_SPEC = tf.TensorSpec([4], tf.float32, name='observation')
ACTION_SPEC = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 1, name='action')


@pytest.fixture(scope='module')
def episodes_path(tmp_path_factory):
    return cartpole.generate(tmp_path_factory.mktemp('data'), num_episodes=12, seed=3)


@pytest.fixture(scope='module')
def episodes(episodes_path):
    return loading.load(episodes_path)


def _n_step_items(batch_size: int = 3) -> dict:
    return {
        types.OBSERVATION: tf.reshape(tf.range(batch_size * 4, dtype=tf.float32), [-1, 4]),
        types.ACTION: tf.constant([0, 1, 1][:batch_size], tf.int64),
        types.N_STEP_RETURN: tf.constant([1.0, 1.99, 0.5][:batch_size]),
        types.N_STEP_DISCOUNT: tf.constant([0.99, 0.0, 1.0][:batch_size]),
        types.NEXT_OBSERVATION: -tf.reshape(tf.range(batch_size * 4, dtype=tf.float32), [-1, 4]),
        types.N_STEP_LENGTH: tf.constant([2, 1, 1][:batch_size], tf.int32),
    }


def test_items_become_transitions_with_the_n_step_target():
    batch = _n_step_items()
    transition = learner.items_to_transitions(batch)
    np.testing.assert_array_equal(transition.time_step.observation, batch[types.OBSERVATION])
    np.testing.assert_array_equal(transition.time_step.step_type, [ts.StepType.MID] * 3)
    np.testing.assert_array_equal(transition.action_step.action, batch[types.ACTION])
    nxt = transition.next_time_step
    np.testing.assert_array_equal(nxt.observation, batch[types.NEXT_OBSERVATION])
    np.testing.assert_array_equal(nxt.reward, batch[types.N_STEP_RETURN])
    np.testing.assert_array_equal(nxt.discount, batch[types.N_STEP_DISCOUNT])


def test_cql_penalty_equals_numpy():
    config = learner.LearnerConfig(fc_layer_params=(8,))
    agent = learner.build_agent(config, observation_spec=OBSERVATION_SPEC, action_spec=ACTION_SPEC)
    experience = learner.items_to_transitions(_n_step_items())
    weights = tf.constant([1.0, 0.5, 0.25])
    penalty = agent.compute_cql_penalty(experience, weights=weights)
    q_values = agent._q_network(experience.time_step.observation)[0].numpy().astype(np.float64)
    taken = q_values[np.arange(3), [0, 1, 1]]
    gap = np.log(np.exp(q_values).sum(axis=1)) - taken
    np.testing.assert_allclose(penalty.numpy(), np.mean(gap * weights.numpy()), rtol=1e-5)


def test_cql_loss_adds_the_penalty_to_the_td_loss():
    config = learner.LearnerConfig(fc_layer_params=(8,), cql_alpha=2.0)
    agent = learner.build_agent(config, observation_spec=OBSERVATION_SPEC, action_spec=ACTION_SPEC)
    experience = learner.items_to_transitions(_n_step_items())
    with_penalty = agent._loss(experience, gamma=0.99)
    agent._cql_alpha = 0.0
    without = agent._loss(experience, gamma=0.99)
    penalty = agent.compute_cql_penalty(experience)
    np.testing.assert_allclose(with_penalty.loss, without.loss + 2.0 * penalty, rtol=1e-5)


def test_negative_cql_alpha_is_refused():
    with pytest.raises(ValueError, match='cql_alpha=-1.0 must be >= 0'):
        learner.build_agent(
            learner.LearnerConfig(cql_alpha=-1.0),
            observation_spec=OBSERVATION_SPEC,
            action_spec=ACTION_SPEC,
        )


def test_evaluation_needs_an_episode():
    agent = learner.build_agent(
        learner.LearnerConfig(), observation_spec=OBSERVATION_SPEC, action_spec=ACTION_SPEC
    )
    assert 0 < learner.evaluate_policy(agent.policy, num_episodes=1) <= 500
    with pytest.raises(ValueError, match='num_episodes=0 is not valid; expected an integer >= 1'):
        learner.evaluate_policy(agent.policy, num_episodes=0)


@pytest.mark.slow
def test_quick_training_from_reverb_lowers_the_loss(episodes, tmp_path):
    config = learner.LearnerConfig(
        num_iterations=300, batch_size=64, eval_interval=0, learning_rate=1e-3
    )
    server, client, signature, num_items = demo.seed_table(episodes, config, num_steps=10_000)
    try:
        agent = learner.build_agent(
            config, observation_spec=signature[types.OBSERVATION], action_spec=ACTION_SPEC
        )
        dataset = demo.make_learner_dataset(client, signature, agent, config)
        history = learner.train(agent, dataset, config, progress=False)
    finally:
        server.stop()
    losses = np.asarray(history.losses)
    assert len(losses) == 300 and np.all(np.isfinite(losses))
    assert losses[-50:].mean() < 0.7 * losses[:50].mean()
    assert int(agent.train_step_counter.numpy()) == 300
    # Priorities came back from the TD errors: they differ from the initial 1.0.
    priorities = np.fromiter(history.last_priorities.values(), float)
    assert 0 < priorities.size <= num_items and priorities.std() > 0
    plot = plots.plot_training(history, behaviour_return=100.0, path=tmp_path / 'p.png')
    assert plot.stat().st_size > 10_000


def test_two_step_tables_feed_tf_agents_and_our_learner(episodes):
    """Interop: a table seeded by `writers.push` is read by TF-Agents' ReverbReplayBuffer."""
    spec = tables.signature_for(items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform('two_step', max_size=10_000, signature=spec)])
    try:
        writers.push(episodes, f'localhost:{server.port}', 'two_step', item=items.TwoStep())
        data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), spec)
        buffer = reverb_replay_buffer.ReverbReplayBuffer(
            data_spec, 'two_step', sequence_length=2, local_server=server
        )
        ours = learner_dataset_two_step(server, data_spec)
        theirs, _ = next(iter(buffer.as_dataset(sample_batch_size=8, num_steps=2)))
        mine = next(iter(ours.as_dataset())).experience
        for experience in (theirs, mine):
            assert experience.observation.shape == (8, 2, 4)
            # Each item is two consecutive steps of one episode.
            np.testing.assert_array_equal(experience.step_type[:, 1] != ts.StepType.FIRST, True)
        agent = learner.build_agent(
            learner.LearnerConfig(fc_layer_params=(8,)),
            observation_spec=data_spec.observation,
            action_spec=ACTION_SPEC,
        )
        for experience in (theirs, mine):
            assert np.isfinite(agent.train(experience).loss.numpy())
    finally:
        server.stop()


def learner_dataset_two_step(server, data_spec):
    from rlds_reverb.learn import sampling

    return sampling.LearnerDataset(
        f'localhost:{server.port}', 'two_step', data_spec=data_spec, batch_size=8, beta=0.5
    )


def test_demo_parser_reads_the_options():
    parser = argparse.ArgumentParser()
    demo_command.add_demo_parser(parser.add_subparsers(dest='command'))
    args = parser.parse_args(['demo', '--quick', '--seed', '3', '--output-dir', 'out'])
    assert (args.quick, args.seed, args.output_dir, args.data_dir) == (True, 3, 'out', None)
    assert args.handler is not None


def test_demo_refuses_an_invalid_dataset(tmp_path, monkeypatch):
    from rlds_reverb.core.errors import InvalidEpisodeError
    from rlds_reverb.storage import tfds_writer

    bad = list(cartpole.simulate_episodes(num_episodes=2, seed=0))
    bad[1][types.STEPS][types.IS_FIRST][:] = False  # No first step.
    path = tfds_writer.write_rlds_dataset(
        tmp_path / 'bad' / '1.0.0', bad, features=cartpole.make_features(), name='bad'
    )
    monkeypatch.setattr(cartpole, 'ensure_default_dataset', lambda data_dir=None: path)
    with pytest.raises(InvalidEpisodeError, match='Episode 1 is invalid'):
        demo.run_demo(quick=True, output_dir=tmp_path / 'out', verbose=False)


@pytest.mark.slow
def test_agent_trains_from_two_servers_and_sends_priorities_to_each(episodes):
    """One logical table over two real servers: batches from both, priorities back to each."""
    config = learner.LearnerConfig(
        num_iterations=150, batch_size=64, eval_interval=0, learning_rate=1e-3
    )
    servers, addresses, signature, counts = demo.seed_tables(
        episodes, config, num_steps=10_000, num_servers=2
    )
    try:
        agent = learner.build_agent(
            config, observation_spec=signature[types.OBSERVATION], action_spec=ACTION_SPEC
        )
        dataset = demo.make_learner_dataset(addresses, signature, agent, config)
        shares = [s.count for s in dataset.sources]
        assert sum(shares) == 64 and min(shares) > 0  # In proportion to the sizes.
        history = learner.train(agent, dataset, config, progress=False)
        changed = []
        for address, count in zip(addresses, counts, strict=True):
            client = reverb.Client(address)
            sampled = client.sample(demo.TABLE, num_samples=4 * count, emit_timesteps=False)
            changed.append(sum(float(s.info.priority) != 1.0 for s in sampled))
    finally:
        for server in servers:
            server.stop()
    losses = np.asarray(history.losses)
    assert np.all(np.isfinite(losses)) and losses[-30:].mean() < losses[:30].mean()
    assert all(n > 0 for n in changed), changed  # Each server got its keys' priorities.


def test_demo_servers_option_is_read_and_checked():
    parser = argparse.ArgumentParser()
    demo_command.add_demo_parser(parser.add_subparsers(dest='command'))
    assert parser.parse_args(['demo', '--servers', '2']).servers == 2
    assert parser.parse_args(['demo']).servers == 1
    with pytest.raises(ValueError, match='num_servers=0 is not valid; expected an integer >= 1'):
        demo.run_demo(quick=True, num_servers=0, verbose=False)
    with pytest.raises(ValueError, match='num_servers=0 is not valid; expected an integer >= 1'):
        demo.seed_tables(None, learner.LearnerConfig(), num_steps=1, num_servers=0)


def test_evaluating_episodes_side_by_side_counts_each_episode_once():
    """Episode k of a batched evaluation is the lone episode of seed + k, to its end only."""
    agent = learner.build_agent(
        learner.LearnerConfig(fc_layer_params=(8,), seed=1),
        observation_spec=OBSERVATION_SPEC,
        action_spec=ACTION_SPEC,
    )
    alone = [learner.evaluate_policy(agent.policy, num_episodes=1, seed=7 + k) for k in range(4)]
    together = learner.evaluate_policy(agent.policy, num_episodes=4, seed=7)
    assert together == pytest.approx(np.mean(alone))
    assert all(0 < r < 500 for r in alone)  # Untrained: short episodes of different lengths.


def test_a_negative_eval_schedule_entry_is_refused():
    config = learner.LearnerConfig(eval_schedule=(0, 10, -5))
    with pytest.raises(
        ValueError, match=r'eval_schedule\[2\]=-5 is not valid; expected an integer >= 0'
    ):
        learner.train(None, None, config, progress=False, eval_fn=lambda: 0.0)


def _history() -> learner.TrainHistory:
    return learner.TrainHistory(
        losses=[1.0, 0.5, 0.4, 0.3],
        eval_iterations=[0, 1, 2, 4],
        eval_returns=[9.0, 60.0, 300.0, 500.0],
        last_priorities={1: 0.1, 2: 0.5, 3: 2.0},
    )


def test_the_figure_shows_the_curve_from_0_and_the_behaviour_line():
    import matplotlib.pyplot as plt

    fig = plots.build_training_figure(_history(), behaviour_return=274.0, final_return=500.0)
    try:
        (curve_axes,) = (ax for ax in fig.axes if ax.get_title() == plots.CURVE_TITLE)
        lines = {line.get_label(): line for line in curve_axes.get_lines()}
        curve = lines['learned policy (greedy)']
        np.testing.assert_array_equal(curve.get_xdata(), [0, 1, 2, 4])
        np.testing.assert_array_equal(curve.get_ydata(), [9.0, 60.0, 300.0, 500.0])
        behaviour = lines[f'{plots.BEHAVIOUR_LABEL}: 274']
        np.testing.assert_array_equal(behaviour.get_ydata(), [274.0, 274.0])
        assert curve_axes.get_xlim()[0] == 0  # The untrained start is on the plot.
        assert 'untrained: 9' in [text.get_text() for text in curve_axes.texts]
        assert '500' in fig.get_suptitle() and '274' in fig.get_suptitle()
        legend = [text.get_text() for text in curve_axes.get_legend().get_texts()]
        assert f'{plots.BEHAVIOUR_LABEL}: 274' in legend
    finally:
        plt.close(fig)


def test_the_curve_line_of_a_summary_lists_every_evaluation():
    summary = {'eval_iterations': [0, 25, 5000], 'eval_returns': [9.3, 84.4, 500.0]}
    assert demo.format_curve(summary) == (
        'learning curve (iteration: return): 0: 9, 25: 84, 5000: 500'
    )


@pytest.mark.slow  # Traces the train step and trains a few dozen iterations: about 15 s.
def test_demo_command_writes_the_curve_from_iteration_0_the_summary_and_the_plot(
    episodes_path, tmp_path, monkeypatch, run_cli
):
    config = learner.LearnerConfig(
        num_iterations=30,
        batch_size=32,
        fc_layer_params=(16,),
        eval_interval=0,
        eval_schedule=(0, 5, 10, 20, 100),
        eval_episodes=2,
    )
    monkeypatch.setattr(cartpole, 'ensure_default_dataset', lambda data_dir=None: episodes_path)
    monkeypatch.setattr(demo, 'make_config', lambda quick, seed: config)
    code, out, _ = run_cli('demo', '--output-dir', tmp_path / 'out')
    assert code == 0
    summary = json.loads((tmp_path / 'out' / demo.SUMMARY_NAME).read_text())
    # Evaluated untrained, on the schedule within the run, and after the last iteration.
    assert summary['eval_iterations'] == [0, 5, 10, 20, 30]
    assert len(summary['eval_returns']) == 5
    assert all(0 < r <= 500 for r in summary['eval_returns'])
    behaviour = demo.compute_behaviour_return(loading.load(episodes_path))
    assert summary['behaviour_return'] == pytest.approx(behaviour)
    assert 0 < summary['eval_return'] <= 500
    assert 0 < summary['eval_seconds'] < summary['train_seconds']
    assert summary['config'] == json.loads(json.dumps(dataclasses.asdict(config)))
    plot = tmp_path / 'out' / demo.PLOT_NAME
    assert summary['plot'] == str(plot) and plot.stat().st_size > 10_000
    assert demo.format_curve(summary) in out
    assert f'behaviour policy {behaviour:.1f}' in out
