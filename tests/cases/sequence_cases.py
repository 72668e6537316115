"""Hand-computed sequence windows (docs/semantics.md §6) and episode items, for every implementation.

Data only. Episodes are compact specs (keyword arguments of `tests.builders.episode`; see
`n_step_cases.py`). `windows` lists each window as the ids of its steps, 10 e + t for step
t of episode e (which is also that step's observation value), PAD for a padding step. A
window holds every field of those steps plus `mask` (true on real steps; a padding step has
zeros and every flag false); `tests.expected.window_items` expands them. `expected` adds
per-window values of single fields, checked as well (e.g. `is_burn_in`, false unless given).

`CASES` run through `adders.sequences(**params)` and, without `burn_in`, through
`push(item=items.Sequence(length, period, end))` (the items are the windows without
`is_burn_in`). `EPISODE_CASES` run through `push(item=items.Episode(max_length, overflow))`.
"""

from tests.cases.episodes import THREE_EPISODES

PAD = None

CASES = [
    dict(
        testcase_name='truncate_period_equals_length',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='truncate'),
        windows=[[0, 1, 2], [3, 4, 5], [6]],
    ),
    dict(
        testcase_name='pad',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='pad'),
        windows=[[0, 1, 2], [3, 4, 5], [6, PAD, PAD]],
        expected=dict(
            is_last=[[0, 0, 0], [0, 0, 0], [1, 0, 0]],  # padding has every flag false
        ),
    ),
    dict(
        testcase_name='drop',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='drop'),
        windows=[[0, 1, 2], [3, 4, 5]],
    ),
    dict(
        testcase_name='last',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=3, period=3, end='last'),
        windows=[[0, 1, 2], [3, 4, 5], [4, 5, 6]],
    ),
    dict(
        testcase_name='continue_crosses_into_the_next_episode',
        episodes=[
            dict(reward=[0] * 7, ending='terminated'),
            dict(reward=[0] * 2, ending='truncated'),
        ],
        params=dict(length=3, period=3, end='continue'),
        windows=[[0, 1, 2], [3, 4, 5], [6, 10, 11]],
        expected=dict(is_first=[[1, 0, 0], [0, 0, 0], [0, 1, 0]]),
    ),
    dict(
        testcase_name='continue_pads_the_end_of_the_stream',
        episodes=[
            dict(reward=[0] * 4, ending='terminated'),
            dict(reward=[0] * 2, ending='truncated'),
        ],
        params=dict(length=4, period=4, end='continue'),
        windows=[[0, 1, 2, 3], [10, 11, PAD, PAD]],
    ),
    dict(
        testcase_name='period_1',
        episodes=[dict(reward=[0] * 4, ending='truncated')],
        params=dict(length=3, period=1, end='truncate'),
        windows=[[0, 1, 2], [1, 2, 3]],
    ),
    dict(
        testcase_name='period_2_with_tail',
        episodes=[dict(reward=[0] * 8, ending='truncated')],
        params=dict(length=3, period=2, end='truncate'),
        windows=[[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7]],
    ),
    dict(
        testcase_name='period_2_pad_two_episodes',
        episodes=[
            dict(reward=[0] * 4, ending='truncated'),
            dict(reward=[0] * 3, ending='terminated'),
        ],
        params=dict(length=3, period=2, end='pad'),
        windows=[[0, 1, 2], [2, 3, PAD], [10, 11, 12]],
    ),
    dict(
        testcase_name='shorter_than_length_truncate',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='truncate'),
        windows=[[0, 1]],
    ),
    dict(
        testcase_name='shorter_than_length_pad',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='pad'),
        windows=[[0, 1, PAD]],
    ),
    dict(
        testcase_name='shorter_than_length_drop',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='drop'),
        windows=[],
    ),
    dict(
        testcase_name='shorter_than_length_last',
        episodes=[dict(reward=[0] * 2, ending='terminated')],
        params=dict(length=3, period=3, end='last'),
        windows=[[0, 1, PAD]],
    ),
    dict(
        testcase_name='burn_in_overlaps_windows',
        episodes=[dict(reward=[0] * 7, ending='terminated')],
        params=dict(length=4, burn_in=2, end='pad'),  # period defaults to length - burn_in
        windows=[[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, PAD]],
        expected=dict(is_burn_in=[[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]),
    ),
    # THREE_EPISODES (tests/cases/episodes.py: E0 of 3 steps, E1 of 1, E2 of 4), length 2,
    # period 2, per end behaviour (CONTINUE: length 3, period 3).
    dict(
        testcase_name='three_episodes_truncate',
        episodes=THREE_EPISODES,
        params=dict(length=2, period=2, end='truncate'),
        windows=[[0, 1], [2], [10], [20, 21], [22, 23]],
    ),
    dict(
        testcase_name='three_episodes_pad',
        episodes=THREE_EPISODES,
        params=dict(length=2, period=2, end='pad'),
        windows=[[0, 1], [2, PAD], [10, PAD], [20, 21], [22, 23]],
    ),
    dict(
        testcase_name='three_episodes_drop',
        episodes=THREE_EPISODES,
        params=dict(length=2, period=2, end='drop'),
        windows=[[0, 1], [20, 21], [22, 23]],
    ),
    dict(
        testcase_name='three_episodes_last',
        episodes=THREE_EPISODES,
        params=dict(length=2, period=2, end='last'),
        windows=[[0, 1], [1, 2], [10, PAD], [20, 21], [22, 23]],
    ),
    dict(
        testcase_name='three_episodes_continue',
        episodes=THREE_EPISODES,
        params=dict(length=3, period=3, end='continue'),
        windows=[[0, 1, 2], [10, 20, 21], [22, 23, PAD]],
    ),
]

# Whole episodes of THREE_EPISODES, max_length 3 (E2 has 4 steps: an error unless split or
# truncated).
EPISODE_MAX_LENGTH = 3
EPISODE_CASES = [
    dict(
        testcase_name='three_episodes_split',
        episodes=THREE_EPISODES,
        params=dict(max_length=EPISODE_MAX_LENGTH, overflow='split'),
        windows=[[0, 1, 2], [10, PAD, PAD], [20, 21, 22], [23, PAD, PAD]],
    ),
    dict(
        testcase_name='three_episodes_truncate',
        episodes=THREE_EPISODES,
        params=dict(max_length=EPISODE_MAX_LENGTH, overflow='truncate'),
        windows=[[0, 1, 2], [10, PAD, PAD], [20, 21, 22]],
    ),
]
