"""Plots of the demo's training run: loss, evaluation returns, priority distribution."""

from __future__ import annotations

import numpy as np

from rlds_reverb.core import files
from rlds_reverb.examples.cql_dqn import TrainHistory

__all__ = [
    'plot_training',
]


def plot_training(
    history: TrainHistory, *, behaviour_return: float, path, title: str = 'Offline CQL-DQN'
):
    """Saves a PNG of the loss, the evaluation return and the final priority distribution.

    Args:
      history: What `train` recorded.
      behaviour_return: The dataset's average return, drawn as a reference line.
      path: Where to write the PNG.
      title: The figure title.

    Returns:
      The path written (a `pathlib.Path`).

    Example:
      >>> plot_training(history, behaviour_return=290.0, path='demo.png')
    """
    import pathlib

    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_eval, ax_prio) = plt.subplots(1, 3, figsize=(15, 4))
    losses = np.asarray(history.losses)
    ax_loss.plot(np.arange(1, len(losses) + 1), losses, alpha=0.3, label='loss')
    window = max(1, len(losses) // 50)
    smooth = np.convolve(losses, np.ones(window) / window, mode='valid')
    ax_loss.plot(np.arange(window, len(losses) + 1), smooth, label=f'mean of {window}')
    ax_loss.set(xlabel='iteration', ylabel='TD + CQL loss', yscale='log', title='loss')
    ax_loss.legend()
    ax_eval.plot(history.eval_iterations, history.eval_returns, 'o-', label='greedy policy')
    ax_eval.axhline(behaviour_return, color='gray', ls='--', label='behaviour (dataset)')
    ax_eval.set(xlabel='iteration', ylabel='average return', title='evaluation', ylim=(0, 520))
    ax_eval.legend(loc='lower right')
    priorities = np.fromiter(history.last_priorities.values(), float)
    if priorities.size:
        bins = np.logspace(np.log10(priorities.min()), np.log10(priorities.max() + 1e-12), 50)
        ax_prio.hist(priorities, bins=bins)
    ax_prio.set(xlabel='priority |δ| + ε', ylabel='items', xscale='log', title='last priorities')
    fig.suptitle(title)
    fig.tight_layout()
    path = pathlib.Path(path)
    files.make_shared_dirs(path.parent)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    files.remove_world_write(path)
    return path
