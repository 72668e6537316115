"""Hand-computed expected Reverb items for the case episodes (data only).

Three episodes; step t of episode e has observation [base_e + t], action base_e + t and
reward base_e + t (base 0, 10, 20):

    E0: 3 steps, terminal, discounts 1 1 1
    E1: 1 step, truncated (a single-step episode), discount 1
    E2: 4 steps, truncated, discounts 1 1 0.5 1

Windows are lists of (episode, step) pairs; PAD marks a null (padding) step.
"""

PAD = None

EPISODES = (
    dict(length=3, base=0.0, terminal=True, discounts=(1.0, 1.0, 1.0)),
    dict(length=1, base=10.0, terminal=False, discounts=(1.0,)),
    dict(length=4, base=20.0, terminal=False, discounts=(1.0, 1.0, 0.5, 1.0)),
)

# Two-step TF-Agents trajectories (FIRST 0, MID 1, LAST 2): the pairs (t, t+1) of each
# episode, nothing for the single-step E1. Fields per item: [2] each.
TWO_STEP_ITEMS = (
    dict(
        step_type=(0, 1),
        observation=(0, 1),
        action=(0, 1),
        next_step_type=(1, 2),
        reward=(0, 1),
        discount=(1, 1),
    ),
    dict(
        step_type=(1, 2),
        observation=(1, 2),
        action=(1, 2),
        next_step_type=(2, 0),
        reward=(1, 2),
        discount=(1, 0),
    ),  # E0 is terminal: discount 0 on its last step.
    dict(
        step_type=(0, 1),
        observation=(20, 21),
        action=(20, 21),
        next_step_type=(1, 1),
        reward=(20, 21),
        discount=(1, 1),
    ),
    dict(
        step_type=(1, 1),
        observation=(21, 22),
        action=(21, 22),
        next_step_type=(1, 2),
        reward=(21, 22),
        discount=(1, 0.5),
    ),
    dict(
        step_type=(1, 2),
        observation=(22, 23),
        action=(22, 23),
        next_step_type=(2, 0),
        reward=(22, 23),
        discount=(0.5, 1),
    ),  # E2 is truncated: its last discount stays.
)

# N-step transitions, n=2, gamma=0.5 (docs/semantics.md §4).
N_STEP = dict(n=2, gamma=0.5)
N_STEP_ITEMS = (
    # E0 (terminal, so d_1 := 0): R = 0 + .5*1*1, D = .5*1*0; then R = 1, D = 0.
    dict(
        observation=0,
        action=0,
        n_step_return=0.5,
        n_step_discount=0.0,
        next_observation=2,
        n_step_length=2,
    ),
    dict(
        observation=1,
        action=1,
        n_step_return=1.0,
        n_step_discount=0.0,
        next_observation=2,
        n_step_length=1,
    ),
    # E2 (truncated): R = 20 + .5*21 = 30.5, D = .5; R = 21 + .5*22 = 32, D = .5*.5;
    # then k = 1: R = 22, D = d_2 = .5.
    dict(
        observation=20,
        action=20,
        n_step_return=30.5,
        n_step_discount=0.5,
        next_observation=22,
        n_step_length=2,
    ),
    dict(
        observation=21,
        action=21,
        n_step_return=32.0,
        n_step_discount=0.25,
        next_observation=23,
        n_step_length=2,
    ),
    dict(
        observation=22,
        action=22,
        n_step_return=22.0,
        n_step_discount=0.5,
        next_observation=23,
        n_step_length=1,
    ),
)

# Sequences: length 2, period 2, per end behaviour (CONTINUE: length 3, period 3).
SEQUENCE_CASES = (
    dict(
        testcase_name='truncate',
        length=2,
        period=2,
        end='truncate',
        windows=(((0, 0), (0, 1)), ((0, 2),), ((1, 0),), ((2, 0), (2, 1)), ((2, 2), (2, 3))),
    ),
    dict(
        testcase_name='pad',
        length=2,
        period=2,
        end='pad',
        windows=(
            ((0, 0), (0, 1)),
            ((0, 2), PAD),
            ((1, 0), PAD),
            ((2, 0), (2, 1)),
            ((2, 2), (2, 3)),
        ),
    ),
    dict(
        testcase_name='drop',
        length=2,
        period=2,
        end='drop',
        windows=(((0, 0), (0, 1)), ((2, 0), (2, 1)), ((2, 2), (2, 3))),
    ),
    dict(
        testcase_name='last',
        length=2,
        period=2,
        end='last',
        windows=(
            ((0, 0), (0, 1)),
            ((0, 1), (0, 2)),
            ((1, 0), PAD),
            ((2, 0), (2, 1)),
            ((2, 2), (2, 3)),
        ),
    ),
    dict(
        testcase_name='continue',
        length=3,
        period=3,
        end='continue',
        windows=(((0, 0), (0, 1), (0, 2)), ((1, 0), (2, 0), (2, 1)), ((2, 2), (2, 3), PAD)),
    ),
)

# Whole episodes, max_length 3 (E2 has 4 steps: an error unless split or truncated).
EPISODE_MAX_LENGTH = 3
EPISODE_CASES = (
    dict(
        testcase_name='split',
        overflow='split',
        windows=(
            ((0, 0), (0, 1), (0, 2)),
            ((1, 0), PAD, PAD),
            ((2, 0), (2, 1), (2, 2)),
            ((2, 3), PAD, PAD),
        ),
    ),
    dict(
        testcase_name='truncate',
        overflow='truncate',
        windows=(((0, 0), (0, 1), (0, 2)), ((1, 0), PAD, PAD), ((2, 0), (2, 1), (2, 2))),
    ),
)
