"""Hand-computed n-step transitions (docs/semantics.md §4), shared by every implementation.

Data only. An episode is given compactly (keyword arguments of `tests.builders.episode`):
`reward` (and optionally `discount`, `observation`, `action` and `extras`) per step, plus
its `ending`: 'terminated' (is_terminal on the last step), 'truncated' (is_last only) or
'segment' (no is_last: a chunk of a stream). Unless given, `discount` is 1 on every step,
the action of step t is t and the observation of step t of episode e is the float 10 e + t,
so `next_observation` values below read as step ids. Expected values list every step of
every episode, the last step included (all zero there: it starts no transition).

The same table pins the n-step Reverb items (`items.NStep(n, gamma)`): the steps with
`n_step_length > 0`, holding the step's observation, action and extra fields and the four
n-step fields (`tests.expected.n_step_items` derives them).
"""

from tests.cases.episodes import THREE_EPISODES

CASES = [
    dict(
        testcase_name='n1_terminated',
        episodes=[dict(reward=[1, 2, 3, 0], ending='terminated')],
        params=dict(n=1, gamma=0.9),
        expected=[
            dict(
                n_step_return=[1, 2, 3, 0],
                n_step_discount=[1, 1, 0, 0],  # d_{L-1} := 0 on a terminal episode
                next_observation=[1, 2, 3, 0],
                n_step_length=[1, 1, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='n2_truncated',
        episodes=[dict(reward=[1, 2, 3, 0], ending='truncated')],
        params=dict(n=2, gamma=0.9),
        expected=[
            dict(
                n_step_return=[2.8, 4.7, 3, 0],  # 1 + .9 * 2, 2 + .9 * 3, 3
                n_step_discount=[0.9, 0.9, 1, 0],  # gamma^(k-1): one gamma fewer
                next_observation=[2, 3, 3, 0],  # the tail bootstraps from o_L
                n_step_length=[2, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='n3_terminated',
        episodes=[dict(reward=[1, 1, 1, 1, 1, 0], ending='terminated')],
        params=dict(n=3, gamma=0.5),
        expected=[
            dict(
                n_step_return=[1.75, 1.75, 1.75, 1.5, 1, 0],
                n_step_discount=[0.25, 0.25, 0, 0, 0, 0],
                next_observation=[3, 4, 5, 5, 5, 0],
                n_step_length=[3, 3, 3, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='n4_truncated_discount_below_one_mid_episode',
        episodes=[
            dict(reward=[1, 2, 3, 4, 5, 6, 0], discount=[1, 0.5, 1, 1, 1, 1, 1], ending='truncated')
        ],
        params=dict(n=4, gamma=1.0),
        expected=[
            dict(
                # 1 + 2 + .5 * 3 + .5 * 4; 2 + .5 * (3 + 4 + 5); 3 + 4 + 5 + 6; ...
                n_step_return=[6.5, 8, 18, 15, 11, 6, 0],
                n_step_discount=[0.5, 0.5, 1, 1, 1, 1, 0],
                next_observation=[4, 5, 6, 6, 6, 6, 0],
                n_step_length=[4, 4, 4, 3, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='single_step_episode',
        episodes=[dict(reward=[7], ending='terminated'), dict(reward=[7], ending='truncated')],
        params=dict(n=3, gamma=0.9),
        expected=[
            dict(n_step_return=[0], n_step_discount=[0], next_observation=[0], n_step_length=[0]),
            dict(n_step_return=[0], n_step_discount=[0], next_observation=[0], n_step_length=[0]),
        ],
    ),
    dict(
        testcase_name='episode_shorter_than_n',
        episodes=[dict(reward=[1, 2, 0], ending='truncated')],
        params=dict(n=5, gamma=0.5),
        expected=[
            dict(
                n_step_return=[2, 2, 0],
                n_step_discount=[0.5, 1, 0],
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='episode_equal_to_n_terminated',
        episodes=[dict(reward=[1, 2, 4, 0], ending='terminated')],
        params=dict(n=3, gamma=0.5),
        expected=[
            dict(
                n_step_return=[3, 4, 4, 0],
                n_step_discount=[0, 0, 0, 0],
                next_observation=[3, 3, 3, 0],
                n_step_length=[3, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='episode_equal_to_n_truncated',
        episodes=[dict(reward=[1, 2, 4, 0], ending='truncated')],
        params=dict(n=3, gamma=0.5),
        expected=[
            dict(
                n_step_return=[3, 4, 4, 0],
                n_step_discount=[0.25, 0.5, 1, 0],
                next_observation=[3, 3, 3, 0],
                n_step_length=[3, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='gamma_0.4_env_discount_0.5',
        episodes=[dict(reward=[1, 1, 1, 0], discount=[0.5, 0.5, 0.5, 0.5], ending='truncated')],
        params=dict(n=2, gamma=0.4),
        expected=[
            dict(
                n_step_return=[1.2, 1.2, 1, 0],  # 1 + .4 * .5 * 1
                n_step_discount=[0.1, 0.1, 0.5, 0],  # .4 * .5 * .5; then gamma^0 * .5
                next_observation=[2, 3, 3, 0],
                n_step_length=[2, 2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='vector_reward_scalar_discount',
        episodes=[dict(reward=[[1, 2], [3, 4], [0, 0]], discount=[1, 0.5, 1], ending='truncated')],
        params=dict(n=2, gamma=1.0),
        expected=[
            dict(
                n_step_return=[[4, 6], [3, 4], [0, 0]],
                n_step_discount=[[0.5, 0.5], [0.5, 0.5], [0, 0]],  # broadcast to the reward
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='dict_reward_dict_discount',
        episodes=[
            dict(
                reward={'a': [1, 2, 0], 'b': [10, 20, 0]},
                discount={'a': [1, 1, 1], 'b': [0.5, 0.5, 0.5]},
                ending='truncated',
            )
        ],
        params=dict(n=2, gamma=1.0),
        expected=[
            dict(
                n_step_return={'a': [3, 2, 0], 'b': [20, 20, 0]},
                n_step_discount={'a': [1, 1, 0], 'b': [0.25, 0.5, 0]},
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='dict_reward_scalar_discount_broadcast',
        episodes=[
            dict(
                reward={'a': [1, 2, 0], 'b': [[1, 1], [2, 2], [0, 0]]},
                discount=[0.5, 0.5, 0.5],
                ending='truncated',
            )
        ],
        params=dict(n=2, gamma=1.0),
        expected=[
            dict(
                n_step_return={'a': [2, 2, 0], 'b': [[2, 2], [2, 2], [0, 0]]},
                n_step_discount={'a': [0.25, 0.5, 0], 'b': [[0.25, 0.25], [0.5, 0.5], [0, 0]]},
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
            )
        ],
    ),
    dict(
        testcase_name='extras_kept_from_the_first_step',
        episodes=[dict(reward=[1, 2, 0], extras={'policy_info': [7, 8, 9]}, ending='truncated')],
        params=dict(n=2, gamma=1.0),
        expected=[
            dict(
                n_step_return=[3, 2, 0],
                n_step_discount=[1, 1, 0],
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
                # The transition starting at step t carries step t's extras, untouched.
                policy_info=[7, 8, 9],
            )
        ],
    ),
    dict(
        testcase_name='two_episodes_nothing_crosses_the_boundary',
        episodes=[
            dict(reward=[1, 2, 0], ending='terminated'),
            dict(reward=[5, 0], ending='truncated'),
        ],
        params=dict(n=3, gamma=1.0),
        expected=[
            dict(
                n_step_return=[3, 2, 0],
                n_step_discount=[0, 0, 0],
                next_observation=[2, 2, 0],
                n_step_length=[2, 1, 0],
            ),
            dict(
                n_step_return=[5, 0],
                n_step_discount=[1, 0],
                next_observation=[11, 0],
                n_step_length=[1, 0],
            ),
        ],
    ),
    dict(
        # THREE_EPISODES (tests/cases/episodes.py): observations [10 e + t], rewards 10 e + t.
        testcase_name='three_episodes',
        episodes=THREE_EPISODES,
        params=dict(n=2, gamma=0.5),
        expected=[
            # E0 (terminal, so d_1 := 0): R = 0 + .5*1*1, D = .5*1*0; then R = 1, D = 0.
            dict(
                n_step_return=[0.5, 1, 0],
                n_step_discount=[0, 0, 0],
                next_observation=[[2], [2], [0]],
                n_step_length=[2, 1, 0],
            ),
            # E1 has one step: no transition.
            dict(n_step_return=[0], n_step_discount=[0], next_observation=[[0]], n_step_length=[0]),
            # E2 (truncated): R = 20 + .5*21 = 30.5, D = .5; R = 21 + .5*22 = 32, D = .5*.5;
            # then k = 1: R = 22, D = d_2 = .5.
            dict(
                n_step_return=[30.5, 32, 22, 0],
                n_step_discount=[0.5, 0.25, 0.5, 0],
                next_observation=[[22], [23], [23], [0]],
                n_step_length=[2, 2, 1, 0],
            ),
        ],
    ),
]
