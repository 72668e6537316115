"""Hand-computed expected outputs of the adders-only transforms: GAE and frame stacking.

Data only. No Reverb item kind exists for these, so `adders` is their one implementation;
the n-step and sequence tables (`n_step_cases.py`, `sequence_cases.py`) are shared with
the Reverb items. An episode is given compactly (keyword arguments of
`tests.builders.episode`): `reward` (and optionally `discount`, `value`, `observation` and
`extras`) per step, plus its `ending`: 'terminated' (is_terminal on the last step),
'truncated' (is_last only) or 'segment' (no is_last: a chunk of a stream). Unless given,
`discount` is 1 on every step and the observation of step t of episode e is the float
10 e + t. Expected values list every step of every episode, the last step included.
"""

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
