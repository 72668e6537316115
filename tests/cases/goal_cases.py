"""Hand-computed goal steps (docs/semantics.md §13), for the adder's sampler and the reference.

Data only. Each case gives an episode's draws u_t (one per step) and the goal step each
draw gives: the smallest offset k whose cumulative probability exceeds u_t, t + k (at most
L), the last step its own goal. For p = 0.5 the cumulative probabilities are 1 - 0.5^k
when terminated (the mass past the end stays on the last step) and (1 - 0.5^k) / (1 - 0.5^n)
when truncated (n = L - t future steps). No draw sits on a cumulative probability.
"""

CASES = [
    dict(
        # n = 4, 3, 2, 1: k = 1 + floor(u n).
        testcase_name='future',
        strategy='future',
        p=None,
        terminal=True,
        uniform=[0.0, 0.5, 0.6, 0.99, 0.3],
        goal_steps=[1, 3, 4, 4, 4],
    ),
    dict(
        testcase_name='future_truncated_is_the_same',
        strategy='future',
        p=None,
        terminal=False,
        uniform=[0.0, 0.5, 0.6, 0.99, 0.3],
        goal_steps=[1, 3, 4, 4, 4],
    ),
    dict(
        # t = 3: u = 0.9 > F(3) = 0.875 -> k = 4, past the end: the last step (7).
        testcase_name='geometric_terminated',
        strategy='geometric',
        p=0.5,
        terminal=True,
        uniform=[0.9, 0.8, 0.55, 0.9, 0.85, 0.1, 0.7, 0.2],
        goal_steps=[4, 4, 4, 7, 7, 6, 7, 7],
    ),
    dict(
        # t = 3: n = 4, F(3) = 0.875 / 0.9375 = 0.933 > 0.9 -> k = 3 (step 6);
        # t = 4: n = 3, F(2) = 0.75 / 0.875 = 0.857 > 0.85 -> k = 2 (step 6).
        testcase_name='geometric_truncated',
        strategy='geometric',
        p=0.5,
        terminal=False,
        uniform=[0.9, 0.8, 0.55, 0.9, 0.85, 0.1, 0.7, 0.2],
        goal_steps=[4, 4, 4, 6, 6, 6, 7, 7],
    ),
    dict(
        testcase_name='geometric_p1_is_the_next_step',
        strategy='geometric',
        p=1.0,
        terminal=False,
        uniform=[0.99, 0.5, 0.0],
        goal_steps=[1, 2, 2],
    ),
    dict(
        testcase_name='single_step_is_its_own_goal',
        strategy='geometric',
        p=0.3,
        terminal=True,
        uniform=[0.7],
        goal_steps=[0],
    ),
]
