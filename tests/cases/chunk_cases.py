"""Hand-computed histories and action chunks (docs/semantics.md §12), for every implementation.

Data only. Episodes are compact specs (keyword arguments of `tests.builders.episode`): the
observation of step t of episode e is the float 10 e + t unless given; actions are given.
`params` are the keyword arguments of `adders.chunks` (and of `items.Chunk`). `expected`
lists, per episode, the fields checked at every step: `observation` `[T, W]`, `action`
`[T, H]`, the four masks (1 marks padding) and sometimes `discount`.

The same cases run through the NumPy reference (`tests/chunk_references.py`), the adder
and `items.Chunk` through a real Reverb server (its items are the steps that start one:
every step under 'recorded', every step but the last under 'ignored').
"""

CASES = [
    dict(
        # The timeline of adders/chunks.py's docstring.
        testcase_name='ignored_terminated_edge',
        episodes=[dict(reward=[0] * 4, action=[0, 1, 2, 3], ending='terminated')],
        params=dict(history=2, horizon=3),
        expected=[
            dict(
                observation=[[0, 0], [0, 1], [1, 2], [2, 3]],
                action=[[0, 1, 2], [1, 2, 2], [2, 2, 2], [2, 2, 2]],
                history_is_pad=[[1, 0], [0, 0], [0, 0], [0, 0]],
                chunk_is_pad=[[0, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1]],
                chunk_is_truncated=[[0, 0, 0]] * 4,
                chunk_is_terminated=[[0, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1]],
                discount=[1, 1, 0, 0],  # 0 into and on the terminal step
            )
        ],
    ),
    dict(
        testcase_name='recorded_truncated_edge',
        episodes=[dict(reward=[0] * 4, action=[0, 1, 2, 3], ending='truncated')],
        params=dict(history=2, horizon=3, final_action='recorded'),
        expected=[
            dict(
                observation=[[0, 0], [0, 1], [1, 2], [2, 3]],
                action=[[0, 1, 2], [1, 2, 3], [2, 3, 3], [3, 3, 3]],
                history_is_pad=[[1, 0], [0, 0], [0, 0], [0, 0]],
                chunk_is_pad=[[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]],
                chunk_is_truncated=[[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]],
                chunk_is_terminated=[[0, 0, 0]] * 4,
                discount=[1, 1, 1, 1],
            )
        ],
    ),
    dict(
        # Two episodes in one stream; zeros fill padding (observation 0 of episode 0 is 0).
        testcase_name='ignored_zero_fill_two_episodes',
        episodes=[
            dict(reward=[0] * 2, action=[5, 6], ending='terminated'),
            dict(reward=[0] * 3, action=[15, 16, 17], ending='truncated'),
        ],
        params=dict(history=3, horizon=2, fill='zero'),
        expected=[
            dict(
                observation=[[0, 0, 0], [0, 0, 1]],
                action=[[5, 0], [0, 0]],
                history_is_pad=[[1, 1, 0], [1, 0, 0]],
                chunk_is_pad=[[0, 1], [1, 1]],
                chunk_is_truncated=[[0, 0], [0, 0]],
                chunk_is_terminated=[[0, 1], [1, 1]],
                discount=[0, 0],
            ),
            dict(
                observation=[[0, 0, 10], [0, 10, 11], [10, 11, 12]],
                action=[[15, 16], [16, 0], [0, 0]],
                history_is_pad=[[1, 1, 0], [1, 0, 0], [0, 0, 0]],
                chunk_is_pad=[[0, 0], [0, 1], [1, 1]],
                chunk_is_truncated=[[0, 0], [0, 1], [1, 1]],
                chunk_is_terminated=[[0, 0]] * 3,
                discount=[1, 1, 1],
            ),
        ],
    ),
    dict(
        # No real action at all: the values repeat a_0, every chunk position is padding.
        testcase_name='single_step_ignored',
        episodes=[dict(reward=[0], action=[7], ending='terminated')],
        params=dict(history=3, horizon=3),
        expected=[
            dict(
                observation=[[0, 0, 0]],
                action=[[7, 7, 7]],
                history_is_pad=[[1, 1, 0]],
                chunk_is_pad=[[1, 1, 1]],
                chunk_is_truncated=[[0, 0, 0]],
                chunk_is_terminated=[[1, 1, 1]],
                discount=[0],
            )
        ],
    ),
    dict(
        testcase_name='single_step_recorded',
        episodes=[dict(reward=[0], action=[7], ending='terminated')],
        params=dict(history=3, horizon=3, final_action='recorded'),
        expected=[
            dict(
                observation=[[0, 0, 0]],
                action=[[7, 7, 7]],
                history_is_pad=[[1, 1, 0]],
                chunk_is_pad=[[0, 1, 1]],
                chunk_is_truncated=[[0, 0, 0]],
                chunk_is_terminated=[[0, 1, 1]],
            )
        ],
    ),
    dict(
        # History and horizon longer than the episode.
        testcase_name='windows_longer_than_the_episode',
        episodes=[dict(reward=[0] * 2, action=[3, 4], ending='truncated')],
        params=dict(history=5, horizon=5, final_action='recorded'),
        expected=[
            dict(
                observation=[[0, 0, 0, 0, 0], [0, 0, 0, 0, 1]],
                action=[[3, 4, 4, 4, 4], [4, 4, 4, 4, 4]],
                history_is_pad=[[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]],
                chunk_is_pad=[[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]],
                chunk_is_truncated=[[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]],
                chunk_is_terminated=[[0, 0, 0, 0, 0]] * 2,
            )
        ],
    ),
    dict(
        # W = H = 1: one position each; under 'ignored' the last action is padding.
        testcase_name='one_by_one_ignored',
        episodes=[dict(reward=[0] * 3, action=[0, 1, 2], ending='terminated')],
        params=dict(history=1, horizon=1),
        expected=[
            dict(
                observation=[[0], [1], [2]],
                action=[[0], [1], [1]],
                history_is_pad=[[0], [0], [0]],
                chunk_is_pad=[[0], [0], [1]],
                chunk_is_truncated=[[0], [0], [0]],
                chunk_is_terminated=[[0], [0], [1]],
                discount=[1, 0, 0],
            )
        ],
    ),
]
