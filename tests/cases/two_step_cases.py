"""Hand-computed two-step trajectories (docs/semantics.md §3), shared by every implementation.

Data only. Each case gives its episodes (compact specs, expanded by
`tests.builders.case_episodes`) and the expected trajectories, one per step, in stream
order (`expected`: field -> per-step values), and optionally `options`, keyword options of
`convert_rlds_to_trajectories` (what `items.TwoStep()`'s defaults already do in a push).
Step types: FIRST=0, MID=1, LAST=2.

The transition into a terminal step has discount 0 whatever the data says, and so has a
terminal last step (docs/semantics.md §3): data discounts 1, 1, 1 on a terminated episode
give 1, 0, 0.

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
            # Data 1, 1, 1: the transition into the terminal step 2 gets 0 (the flags decide).
            discount=[1.0, 0.0, 0.0],
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
            # Data 1 1 | 1 | 1 1 1: both terminated episodes end with 0 0 and 0.
            discount=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        ),
    ),
    dict(
        # THREE_EPISODES (tests/cases/episodes.py). Its Reverb items are the pairs of E0
        # (3 steps: 2 items) and E2 (4 steps: 3 items); E1 (1 step) gives none. E0 is
        # terminated: discount 0 into its last step (data 1) and on it; E2 is truncated:
        # its discounts stay as the data has them (0.5 on step 2 included).
        testcase_name='three_episodes',
        episodes=THREE_EPISODES,
        expected=dict(
            step_type=[F, M, L, L, F, M, M, L],
            next_step_type=[M, L, F, L, M, M, L, F],
            observation=[[0], [1], [2], [10], [20], [21], [22], [23]],
            action=[0, 1, 2, 10, 20, 21, 22, 23],
            reward=[0, 1, 2, 10, 20, 21, 22, 23],
            discount=[1, 0, 0, 1, 1, 1, 0.5, 1],
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
            discount=[0.0, 0.0],
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
        # The drop-in converter drops extra step fields (as TF-Agents) unless asked to keep
        # them; items.TwoStep() keeps them (docs/semantics.md §3).
        testcase_name='extra_step_fields',
        options=dict(extra_fields='policy_info'),
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
            discount=[0.0, 0.0],
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
            discount=np.array([0.0, 0.0], np.float64),
        ),
    ),
    dict(
        # Open X-Embodiment's layout: the data leaves the discount at 0.9 up to and on the
        # terminal step. The flags decide: 0 into the terminal step 3 and on it.
        testcase_name='discount_contradicts_terminal_flag',
        episodes=[
            dict(
                observation=np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], np.float32),
                action=[1, 2, 3, 0],
                reward=[1.0, 2.0, 3.0, 0.0],
                discount=[0.9, 0.9, 0.9, 0.9],
                ending='terminated',
            )
        ],
        expected=dict(
            step_type=[F, M, M, L],
            next_step_type=[M, M, L, F],
            observation=np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], np.float32),
            action=[1, 2, 3, 0],
            reward=[1.0, 2.0, 3.0, 0.0],
            discount=[0.9, 0.9, 0.0, 0.0],
        ),
    ),
    dict(
        # dm_env / EnvLogger's layout (the embedded CartPole data): the data already has 0
        # into the terminal step, so ours and TF-Agents' agree.
        testcase_name='discount_agrees_with_terminal_flag',
        episodes=[
            dict(
                observation=_OBS3,
                action=[1, 2, 0],
                reward=[1.0, 1.0, 0.0],
                discount=[1.0, 0.0, 0.0],
                ending='terminated',
            )
        ],
        expected=dict(
            step_type=[F, M, L],
            next_step_type=[M, L, F],
            observation=_OBS3,
            action=[1, 2, 0],
            reward=[1.0, 1.0, 0.0],
            discount=[1.0, 0.0, 0.0],
        ),
    ),
]

# TF-Agents' converter gets these right; on the others it differs on purpose (see
# transform/test_convert.py and system/test_tf_agents_contract.py): it keeps a data discount of
# the transition into a terminal step (complete_episode, several_episodes_in_one_stream,
# three_episodes, discount_contradicts_terminal_flag, and the terminated dict, extras and
# float64 cases), copies a dict observation's pair into both trajectories, drops extra step
# fields and hard-codes a float32 discount.
TF_AGENTS_AGREES = [
    'truncated_episode',
    'single_step_episodes',
    'uint8_images',
    'discount_agrees_with_terminal_flag',
]
# Where TF-Agents differs only by keeping the data's discount into a terminal step: its
# discounts, everything else as in `expected` (the deliberate deviation D1, docs/deviations.md).
TF_AGENTS_TERMINAL_DISCOUNTS = {
    'complete_episode': [1.0, 1.0, 0.0],
    'several_episodes_in_one_stream': [1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
    'three_episodes': [1, 1, 0, 1, 1, 1, 0.5, 1],
    'discount_contradicts_terminal_flag': [0.9, 0.9, 0.9, 0.0],
}
