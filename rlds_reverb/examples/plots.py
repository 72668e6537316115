"""Plots of the demo's training run: the learning curve, the loss, the priority distribution."""

from __future__ import annotations

import numpy as np

from rlds_reverb.core import files
from rlds_reverb.examples.cql_dqn import TrainHistory

__all__ = [
    'BEHAVIOUR_LABEL',
    'CURVE_TITLE',
    'build_training_figure',
    'plot_training',
]

CURVE_TITLE = 'evaluation return'
BEHAVIOUR_LABEL = 'behaviour policy (the dataset)'
# Iterations up to this are drawn on a linear scale, later ones on a log scale: the rise
# from the untrained policy takes the first few hundred of the run's thousands.
_LINEAR_UP_TO = 100
_ITERATION_TICKS = (0, 25, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000)


def build_training_figure(
    history: TrainHistory,
    *,
    behaviour_return: float,
    final_return: float | None = None,
    title: str = 'Offline CQL-DQN',
):
    """Returns the matplotlib figure of a training run (not saved; `plot_training` saves it).

    The large left panel is the learning curve: the greedy policy's evaluation return
    against the iteration (from 0, the untrained policy, if evaluated), next to the
    behaviour policy's return as a horizontal line. The right panels show the loss and the
    last priorities sent to Reverb.

    Args:
      history: What `train` recorded.
      behaviour_return: The dataset's average return, drawn as a labelled line.
      final_return: The final evaluation's return, for the title (None: the curve's last).
      title: The start of the figure title.

    Returns:
      A `matplotlib.figure.Figure`; its learning-curve axes has the title `CURVE_TITLE`.

    Example:
      >>> fig = build_training_figure(history, behaviour_return=274.1)
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(14, 6))
    grid = fig.add_gridspec(2, 2, width_ratios=(3, 2))
    _draw_curve(fig.add_subplot(grid[:, 0]), history, behaviour_return)
    _draw_loss(fig.add_subplot(grid[0, 1]), history.losses)
    _draw_priorities(fig.add_subplot(grid[1, 1]), history.last_priorities)
    returns = history.eval_returns
    if final_return is None and returns:
        final_return = returns[-1]
    headline = title
    if final_return is not None:
        headline += (
            f': the learned policy scores {final_return:.0f}, the policy that collected '
            f'the data {behaviour_return:.0f}'
        )
    fig.suptitle(headline, fontsize=14)
    fig.tight_layout()
    return fig


def _draw_curve(ax_eval, history: TrainHistory, behaviour_return: float) -> None:
    """The learning curve against the behaviour policy's return (`CURVE_TITLE`)."""
    from matplotlib import ticker

    iterations, returns = history.eval_iterations, history.eval_returns
    ax_eval.axhline(
        behaviour_return,
        color='tab:red',
        ls='--',
        lw=2,
        label=f'{BEHAVIOUR_LABEL}: {behaviour_return:.0f}',
    )
    ax_eval.plot(iterations, returns, 'o-', color='tab:blue', lw=2, label='learned policy (greedy)')
    if iterations and iterations[0] == 0:
        ax_eval.annotate(
            f'untrained: {returns[0]:.0f}',
            xy=(0, returns[0]),
            xytext=(12, 18),
            textcoords='offset points',
            arrowprops={'arrowstyle': '->'},
        )
    ax_eval.set_xscale('symlog', linthresh=_LINEAR_UP_TO)
    last = max(iterations, default=1)
    ticks = [t for t in _ITERATION_TICKS if t <= last]
    if last > 1.5 * ticks[-1]:  # Label the last iteration unless a tick is close to it.
        ticks.append(last)
    ax_eval.set_xticks(ticks)
    ax_eval.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f'{x:,.0f}'))
    ax_eval.xaxis.set_minor_locator(ticker.NullLocator())
    ax_eval.set(
        xlabel=f'train iterations (linear up to {_LINEAR_UP_TO}, log scale beyond)',
        ylabel='average return',
        title=CURVE_TITLE,
        xlim=(0, last * 1.05),
        ylim=(0, 520),
    )
    ax_eval.grid(alpha=0.3)
    ax_eval.legend(loc='lower right')


def _draw_loss(ax_loss, history_losses: list[float]) -> None:
    """The loss per iteration, and its running mean over about a fiftieth of the run."""
    losses = np.asarray(history_losses)
    ax_loss.plot(np.arange(1, len(losses) + 1), losses, alpha=0.3, label='loss')
    window = max(1, len(losses) // 50)
    smooth = np.convolve(losses, np.ones(window) / window, mode='valid')
    ax_loss.plot(np.arange(window, len(losses) + 1), smooth, label=f'mean of {window}')
    ax_loss.set(xlabel='iteration', ylabel='TD + CQL loss', yscale='log', title='loss')
    ax_loss.legend()


def _draw_priorities(ax_prio, last_priorities: dict[int, float]) -> None:
    """A histogram of the last priorities sent, on log-spaced bins."""
    priorities = np.fromiter(last_priorities.values(), float)
    if priorities.size:
        bins = np.logspace(np.log10(priorities.min()), np.log10(priorities.max() + 1e-12), 50)
        ax_prio.hist(priorities, bins=bins.tolist())
    ax_prio.set(xlabel='priority |δ| + ε', ylabel='items', xscale='log', title='last priorities')


def plot_training(
    history: TrainHistory,
    *,
    behaviour_return: float,
    path,
    final_return: float | None = None,
    title: str = 'Offline CQL-DQN',
):
    """Saves a PNG of `build_training_figure`: learning curve, loss, last priorities.

    Args:
      history: What `train` recorded.
      behaviour_return: The dataset's average return, drawn as a labelled line.
      path: Where to write the PNG.
      final_return: The final evaluation's return, for the title (None: the curve's last).
      title: The start of the figure title.

    Returns:
      The path written (a `pathlib.Path`).

    Example:
      >>> plot_training(history, behaviour_return=274.1, path='demo.png')
    """
    import pathlib

    import matplotlib.pyplot as plt

    fig = build_training_figure(
        history, behaviour_return=behaviour_return, final_return=final_return, title=title
    )
    path = pathlib.Path(path)
    files.make_shared_dirs(path.parent)
    with files.replace_file(path) as out:  # Never world-writable, even while written.
        fig.savefig(out, format=path.suffix[1:] or 'png', dpi=100)
    plt.close(fig)
    return path
