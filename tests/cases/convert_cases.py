"""Hand-computed two-step trajectory cases (docs/semantics.md §3), shared by every converter test.

Each case gives episodes (lists of per-step values) and the expected trajectories, one per
step, in stream order. Step types: FIRST=0, MID=1, LAST=2. Data only: no logic.
"""

import numpy as np

F, M, L = 0, 1, 2
T, N = True, False


def _flags(length, terminal):
    first = [T] + [N] * (length - 1)
    last = [N] * (length - 1) + [T]
    return {'is_first': first, 'is_last': last, 'is_terminal': [terminal and x for x in last]}


def _episode(obs, action, reward, discount, terminal, **extra):
    steps = {
        'observation': obs,
        'action': np.asarray(action, np.int64),
        'reward': np.asarray(reward, np.float32),
        'discount': np.asarray(discount, np.float32),
    }
    steps.update({k: np.asarray(v, bool) for k, v in _flags(len(action), terminal).items()})
    steps.update(extra)
    return steps


_OBS3 = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], np.float32)

CASES = [
    dict(
        testcase_name='complete_episode',
        episodes=[_episode(_OBS3, [1, 2, 0], [1.0, 2.0, 0.0], [1.0, 1.0, 1.0], terminal=True)],
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
        episodes=[_episode(_OBS3, [1, 2, 0], [1.0, 2.0, 0.0], [0.9, 0.9, 0.9], terminal=False)],
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
            _episode(np.array([[7.0, 8.0]], np.float32), [3], [5.0], [1.0], terminal=True),
            _episode(np.array([[9.0, 1.0]], np.float32), [4], [6.0], [0.5], terminal=False),
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
            _episode(_OBS3[:2], [1, 0], [1.0, 0.0], [1.0, 1.0], terminal=True),
            _episode(np.array([[6.0, 7.0]], np.float32), [2], [3.0], [1.0], terminal=True),
            _episode(_OBS3, [0, 1, 2], [4.0, 5.0, 6.0], [1.0, 1.0, 1.0], terminal=False),
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
        testcase_name='dict_observations',
        episodes=[
            _episode(
                {
                    'position': np.array([[0.0], [1.0]], np.float32),
                    'label': np.array([10, 11], np.int32),
                },
                [1, 0],
                [1.0, 0.0],
                [1.0, 1.0],
                terminal=True,
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
            _episode(
                np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3),
                [0, 1],
                [0.5, 0.0],
                [1.0, 1.0],
                terminal=False,
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
            _episode(
                _OBS3[:2],
                [1, 0],
                [1.0, 0.0],
                [1.0, 1.0],
                terminal=True,
                log_prob=np.array([-0.5, -0.7], np.float32),
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
            {
                'observation': np.array([[0.25], [0.5]], np.float64),
                'action': np.array([0.1, 0.2], np.float64),
                'reward': np.array([1.5, 0.0], np.float64),
                'discount': np.array([0.99, 0.99], np.float64),
                **{k: np.asarray(v, bool) for k, v in _flags(2, True).items()},
            }
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
