"""Episodes shared by several case tables (data only; `tests.builders.case_episodes` expands them).

Step ids: step t of episode e has id 10 e + t, which is also its observation value.

The three episodes of the Reverb cases: step t of episode e has observation [10 e + t],
action 10 e + t and reward 10 e + t.

    E0: 3 steps, terminated, discounts 1 1 1
    E1: 1 step, truncated (a single-step episode), discount 1
    E2: 4 steps, truncated, discounts 1 1 0.5 1
"""

THREE_EPISODES = (
    dict(
        observation=[[0.0], [1.0], [2.0]],
        action=[0, 1, 2],
        reward=[0.0, 1.0, 2.0],
        discount=[1.0, 1.0, 1.0],
        ending='terminated',
    ),
    dict(observation=[[10.0]], action=[10], reward=[10.0], discount=[1.0], ending='truncated'),
    dict(
        observation=[[20.0], [21.0], [22.0], [23.0]],
        action=[20, 21, 22, 23],
        reward=[20.0, 21.0, 22.0, 23.0],
        discount=[1.0, 1.0, 0.5, 1.0],
        ending='truncated',
    ),
)
