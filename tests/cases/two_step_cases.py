"""Hand-computed two-step trajectories (docs/semantics.md §3), shared by every implementation.

Data only. Each case gives its episodes (compact specs, expanded by
`tests.builders.case_episodes`) and the expected trajectories, one per step, in stream
order (`expected`: field -> per-step values). Step types: FIRST=0, MID=1, LAST=2.

The same table pins the two-step Reverb items (`items.TwoStep`): they are the pairs of
consecutive trajectories (t, t+1) inside one episode, none for a single-step episode
(`tests.expected.two_step_items` derives them).
"""

import numpy as np

from tests.cases.episodes import THREE_EPISODES

F, M, L = 0, 1, 2

_OBS3 = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], np.float32)

CASES = [
    dict(
        testcase_name='complete_episode',
        episodes=[
            dict(
                observation=_OBS3,
                action=[1, 2, 0],
                reward=[1.0, 2.0, 0.0],
                discount=[1.0, 1.0, 1.0],
                ending='terminated',
            )
        ],
        expected=dict(
            step_type=[F, M, L],
            next_step_type=[M, L, F],
            observation=_OBS3,
            action=[1, 2, 0],
            reward=[1.0, 2.0, 0.0],
            discount=[1.0, 1.0, 0.0],
        ),
    ),
    dict(
        testcase_name='truncated_episode',
        episodes=[
            dict(
                observation=_OBS3,
                action=[1, 2, 0],
                reward=[1.0, 2.0, 0.0],
                discount=[0.9, 0.9, 0.9],
                ending='truncated',
            )
        ],
        expected=dict(
            step_type=[F, M, L],
            next_step_type=[M, L, F],
            observation=_OBS3,
            action=[1, 2, 0],
            reward=[1.0, 2.0, 0.0],
            discount=[0.9, 0.9, 0.9],
        ),
    ),
    dict(
        testcase_name='single_step_episodes',
        episodes=[
            dict(
                observation=np.array([[7.0, 8.0]], np.float32),
                action=[3],
                reward=[5.0],
                discount=[1.0],
                ending='terminated',
            ),
            dict(
                observation=np.array([[9.0, 1.0]], np.float32),
                action=[4],
                reward=[6.0],
                discount=[0.5],
                ending='truncated',
            ),
        ],
        expected=dict(
            step_type=[L, L],
            next_step_type=[L, L],
            observation=np.array([[7.0, 8.0], [9.0, 1.0]], np.float32),
            action=[3, 4],
            reward=[5.0, 6.0],
            discount=[0.0, 0.5],
        ),
    ),
    dict(
        testcase_name='several_episodes_in_one_stream',
        episodes=[
            dict(
                observation=_OBS3[:2],
                action=[1, 0],
                reward=[1.0, 0.0],
                discount=[1.0, 1.0],
                ending='terminated',
            ),
            dict(
                observation=np.array([[6.0, 7.0]], np.float32),
                action=[2],
                reward=[3.0],
                discount=[1.0],
                ending='terminated',
            ),
            dict(
                observation=_OBS3,
                action=[0, 1, 2],
                reward=[4.0, 5.0, 6.0],
                discount=[1.0, 1.0, 1.0],
                ending='truncated',
            ),
        ],
        expected=dict(
            step_type=[F, L, L, F, M, L],
            next_step_type=[L, F, L, M, L, F],
            observation=np.concatenate([_OBS3[:2], [[6.0, 7.0]], _OBS3]).astype(np.float32),
            action=[1, 0, 2, 0, 1, 2],
            reward=[1.0, 0.0, 3.0, 4.0, 5.0, 6.0],
            discount=[1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        ),
    ),
    dict(
        # THREE_EPISODES (tests/cases/episodes.py). Its Reverb items are the pairs of E0
        # (3 steps: 2 items) and E2 (4 steps: 3 items); E1 (1 step) gives none. E0 is
        # terminal: discount 0 on its last step; E2 is truncated: its last discount stays.
        testcase_name='three_episodes',
        episodes=THREE_EPISODES,
        expected=dict(
            step_type=[F, M, L, L, F, M, M, L],
            next_step_type=[M, L, F, L, M, M, L, F],
            observation=[[0], [1], [2], [10], [20], [21], [22], [23]],
            action=[0, 1, 2, 10, 20, 21, 22, 23],
            reward=[0, 1, 2, 10, 20, 21, 22, 23],
            discount=[1, 1, 0, 1, 1, 1, 0.5, 1],
        ),
    ),
    dict(
        testcase_name='dict_observations',
        episodes=[
            dict(
                observation={
                    'position': np.array([[0.0], [1.0]], np.float32),
                    'label': np.array([10, 11], np.int32),
                },
                action=[1, 0],
                reward=[1.0, 0.0],
                discount=[1.0, 1.0],
                ending='terminated',
            )
        ],
        expected=dict(
            step_type=[F, L],
            next_step_type=[L, F],
            observation={
                'position': np.array([[0.0], [1.0]], np.float32),
                'label': np.array([10, 11], np.int32),
            },
            action=[1, 0],
            reward=[1.0, 0.0],
            discount=[1.0, 0.0],
        ),
    ),
    dict(
        testcase_name='uint8_images',
        episodes=[
            dict(
                observation=np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3),
                action=[0, 1],
                reward=[0.5, 0.0],
                discount=[1.0, 1.0],
                ending='truncated',
            )
        ],
        expected=dict(
            step_type=[F, L],
            next_step_type=[L, F],
            observation=np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3),
            action=[0, 1],
            reward=[0.5, 0.0],
            discount=[1.0, 1.0],
        ),
    ),
    dict(
        testcase_name='extra_step_fields',
        episodes=[
            dict(
                observation=_OBS3[:2],
                action=[1, 0],
                reward=[1.0, 0.0],
                discount=[1.0, 1.0],
                ending='terminated',
                extras={'log_prob': np.array([-0.5, -0.7], np.float32)},
            )
        ],
        expected=dict(
            step_type=[F, L],
            next_step_type=[L, F],
            observation=_OBS3[:2],
            action=[1, 0],
            reward=[1.0, 0.0],
            discount=[1.0, 0.0],
            policy_info={'log_prob': np.array([-0.5, -0.7], np.float32)},
        ),
    ),
    dict(
        testcase_name='float64_fields',
        episodes=[
            dict(
                observation=np.array([[0.25], [0.5]], np.float64),
                action=np.array([0.1, 0.2], np.float64),
                reward=np.array([1.5, 0.0], np.float64),
                discount=np.array([0.99, 0.99], np.float64),
                ending='terminated',
            )
        ],
        expected=dict(
            step_type=[F, L],
            next_step_type=[L, F],
            observation=np.array([[0.25], [0.5]], np.float64),
            action=np.array([0.1, 0.2], np.float64),
            reward=np.array([1.5, 0.0], np.float64),
            discount=np.array([0.99, 0.0], np.float64),
        ),
    ),
]

# TF-Agents' converter gets these right; on the others it differs on purpose (see
# tests/test_convert.py): it copies a dict observation's pair into both trajectories,
# drops extra step fields and hard-codes a float32 discount.
TF_AGENTS_AGREES = [
    'complete_episode',
    'truncated_episode',
    'single_step_episodes',
    'several_episodes_in_one_stream',
    'three_episodes',
    'uint8_images',
]
