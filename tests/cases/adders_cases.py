"""Hand-computed expected outputs of the adders, shared by every implementation under test.

Data only. An episode is given compactly: `reward` (and optionally `discount`, `value`,
`observation` and extra fields) per step, plus its `ending`: 'terminated' (is_terminal on
the last step), 'truncated' (is_last only) or 'segment' (no is_last: a chunk of a stream).
Unless given, `discount` is 1 on every step and the observation of step t of episode e is
the float 10 e + t, so `next_observation` values below read as step indices. Expected
values list every step of every episode, the last step included.
"""

N_STEP_CASES = [
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
]

GAE_CASES = [
    dict(
        testcase_name='lambda1_terminated',
        episodes=[dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='terminated')],
        params=dict(gamma=0.5, lambda_=1.0),
        expected=[
            dict(
                advantage=[0.75, -0.5, -2, 0],
                # Monte Carlo returns; the terminal last step bootstraps from 0.
                **{'return': [1.75, 1.5, 1, 0]},
                value=[1, 2, 3, 0],
            )
        ],
    ),
    dict(
        testcase_name='lambda1_truncated',
        episodes=[dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='truncated')],
        params=dict(gamma=0.5, lambda_=1.0),
        expected=[
            dict(advantage=[1.25, 0.5, 0, 0], value=[1, 2, 3, 4], **{'return': [2.25, 2.5, 3, 4]})
        ],
    ),
    dict(
        testcase_name='lambda0_terminated',
        episodes=[dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='terminated')],
        params=dict(gamma=0.5, lambda_=0.0),
        expected=[
            dict(advantage=[1, 0.5, -2, 0], value=[1, 2, 3, 0], **{'return': [2, 2.5, 1, 0]})
        ],
    ),
    dict(
        testcase_name='lambda0_truncated',
        episodes=[dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='truncated')],
        params=dict(gamma=0.5, lambda_=0.0),
        expected=[dict(advantage=[1, 0.5, 0, 0], value=[1, 2, 3, 4], **{'return': [2, 2.5, 3, 4]})],
    ),
    dict(
        testcase_name='lambda0.95_terminated',
        episodes=[dict(reward=[1, 0, 2, 0], value=[1, 1, 1, 1], ending='terminated')],
        params=dict(gamma=1.0, lambda_=0.95),
        # deltas 1, 0, 1; A = 1 + .95 * (0 + .95 * 1), 0 + .95 * 1, 1
        expected=[
            dict(
                advantage=[1.9025, 0.95, 1, 0],
                value=[1, 1, 1, 0],
                **{'return': [2.9025, 1.95, 2, 0]},
            )
        ],
    ),
    dict(
        testcase_name='lambda0.95_truncated',
        episodes=[dict(reward=[1, 0, 2, 0], value=[1, 1, 1, 1], ending='truncated')],
        params=dict(gamma=1.0, lambda_=0.95),
        # deltas 1, 0, 2; A = 1 + .95 * 1.9, .95 * 2, 2
        expected=[
            dict(advantage=[2.805, 1.9, 2, 0], value=[1, 1, 1, 1], **{'return': [3.805, 2.9, 3, 1]})
        ],
    ),
    dict(
        testcase_name='discount_below_one_mid_episode',
        episodes=[
            dict(
                reward=[1, 1, 1, 0], discount=[1, 0.5, 1, 1], value=[0, 0, 0, 2], ending='truncated'
            )
        ],
        params=dict(gamma=1.0, lambda_=1.0),
        expected=[
            dict(advantage=[3.5, 2.5, 3, 0], value=[0, 0, 0, 2], **{'return': [3.5, 2.5, 3, 2]})
        ],
    ),
    dict(
        testcase_name='segment_without_is_last_bootstraps_from_its_last_value',
        episodes=[dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='segment')],
        params=dict(gamma=0.5, lambda_=1.0),
        expected=[
            dict(advantage=[1.25, 0.5, 0, 0], value=[1, 2, 3, 4], **{'return': [2.25, 2.5, 3, 4]})
        ],
    ),
    dict(
        testcase_name='single_step_episodes',
        episodes=[
            dict(reward=[0], value=[5], ending='terminated'),
            dict(reward=[0], value=[5], ending='truncated'),
        ],
        params=dict(gamma=0.9, lambda_=0.9),
        expected=[
            dict(advantage=[0], value=[0], **{'return': [0]}),
            dict(advantage=[0], value=[5], **{'return': [5]}),
        ],
    ),
    dict(
        testcase_name='two_episodes_nothing_crosses_the_boundary',
        episodes=[
            dict(reward=[1, 0], value=[1, 1], ending='terminated'),
            dict(reward=[2, 0], value=[1, 3], ending='truncated'),
        ],
        params=dict(gamma=1.0, lambda_=1.0),
        expected=[
            dict(advantage=[0, 0], value=[1, 0], **{'return': [1, 0]}),
            dict(advantage=[4, 0], value=[1, 3], **{'return': [5, 3]}),
        ],
    ),
    dict(
        testcase_name='vector_reward_and_value',
        episodes=[dict(reward=[[1, 2], [0, 0]], value=[[0, 1], [1, 1]], ending='truncated')],
        params=dict(gamma=1.0, lambda_=1.0),
        expected=[
            dict(
                advantage=[[2, 2], [0, 0]],
                value=[[0, 1], [1, 1]],
                **{'return': [[2, 3], [1, 1]]},
            )
        ],
    ),
]

# Observations are step indices (10 e + t); `windows` lists each window's observations,
# `mask` (1 on real steps) and, where given, `is_burn_in` and `is_first`.
SEQUENCE_CASES = [
    dict(
        testcase_name='truncate_period_equals_length',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='truncate'),
        expected=dict(observation=[[0, 1, 2], [3, 4, 5], [6]], mask=[[1, 1, 1], [1, 1, 1], [1]]),
    ),
    dict(
        testcase_name='pad',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='pad'),
        expected=dict(
            observation=[[0, 1, 2], [3, 4, 5], [6, 0, 0]],
            mask=[[1, 1, 1], [1, 1, 1], [1, 0, 0]],
            is_last=[[0, 0, 0], [0, 0, 0], [1, 0, 0]],  # padding has every flag false
        ),
    ),
    dict(
        testcase_name='drop',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='drop'),
        expected=dict(observation=[[0, 1, 2], [3, 4, 5]], mask=[[1, 1, 1], [1, 1, 1]]),
    ),
    dict(
        testcase_name='last',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='last'),
        expected=dict(
            observation=[[0, 1, 2], [3, 4, 5], [4, 5, 6]], mask=[[1, 1, 1], [1, 1, 1], [1, 1, 1]]
        ),
    ),
    dict(
        testcase_name='continue_crosses_into_the_next_episode',
        episodes=[
            dict(reward=[0] * 7, ending='terminated'),
            dict(reward=[0] * 2, ending='truncated'),
        ],
        params=dict(length=3, period=3, end='continue'),
        expected=dict(
            observation=[[0, 1, 2], [3, 4, 5], [6, 10, 11]],
            mask=[[1, 1, 1], [1, 1, 1], [1, 1, 1]],
            is_first=[[1, 0, 0], [0, 0, 0], [0, 1, 0]],
        ),
    ),
    dict(
        testcase_name='continue_pads_the_end_of_the_stream',
        episodes=[
            dict(reward=[0] * 4, ending='terminated'),
            dict(reward=[0] * 2, ending='truncated'),
        ],
        params=dict(length=4, period=4, end='continue'),
        expected=dict(
            observation=[[0, 1, 2, 3], [10, 11, 0, 0]], mask=[[1, 1, 1, 1], [1, 1, 0, 0]]
        ),
    ),
    dict(
        testcase_name='period_1',
        episodes=[dict(reward=[0] * 4, ending='truncated')],
        params=dict(length=3, period=1, end='truncate'),
        expected=dict(observation=[[0, 1, 2], [1, 2, 3]], mask=[[1, 1, 1], [1, 1, 1]]),
    ),
    dict(
        testcase_name='period_2_with_tail',
        episodes=[dict(reward=[0] * 8, ending='truncated')],
        params=dict(length=3, period=2, end='truncate'),
        expected=dict(
            observation=[[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7]],
            mask=[[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1]],
        ),
    ),
    dict(
        testcase_name='period_2_pad_two_episodes',
        episodes=[
            dict(reward=[0] * 4, ending='truncated'),
            dict(reward=[0] * 3, ending='terminated'),
        ],
        params=dict(length=3, period=2, end='pad'),
        expected=dict(
            observation=[[0, 1, 2], [2, 3, 0], [10, 11, 12]],
            mask=[[1, 1, 1], [1, 1, 0], [1, 1, 1]],
        ),
    ),
    dict(
        testcase_name='shorter_than_length_truncate',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='truncate'),
        expected=dict(observation=[[0, 1]], mask=[[1, 1]]),
    ),
    dict(
        testcase_name='shorter_than_length_pad',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='pad'),
        expected=dict(observation=[[0, 1, 0]], mask=[[1, 1, 0]]),
    ),
    dict(
        testcase_name='shorter_than_length_drop',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='drop'),
        expected=dict(observation=[], mask=[]),
    ),
    dict(
        testcase_name='shorter_than_length_last',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='last'),
        expected=dict(observation=[[0, 1, 0]], mask=[[1, 1, 0]]),
    ),
    dict(
        testcase_name='burn_in_overlaps_windows',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=4, burn_in=2, end='pad'),  # period defaults to length - burn_in
        expected=dict(
            observation=[[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 0]],
            mask=[[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]],
            is_burn_in=[[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]],
        ),
    ),
]

STACK_CASES = [
    dict(
        testcase_name='k3_repeats_the_first_observation',
        episodes=[
            dict(reward=[0, 0, 0], ending='terminated'),
            dict(reward=[0, 0], ending='truncated'),
        ],
        params=dict(k=3),
        expected=[
            dict(observation=[[0, 0, 0], [0, 0, 1], [0, 1, 2]]),
            dict(observation=[[10, 10, 10], [10, 10, 11]]),
        ],
    ),
    dict(
        testcase_name='k1_adds_a_stack_axis',
        episodes=[dict(reward=[0, 0], ending='terminated')],
        params=dict(k=1),
        expected=[dict(observation=[[0], [1]])],
    ),
    dict(
        testcase_name='k_longer_than_episode',
        episodes=[dict(reward=[0, 0], ending='terminated')],
        params=dict(k=4),
        expected=[dict(observation=[[0, 0, 0, 0], [0, 0, 0, 1]])],
    ),
]
