"""The embedded default dataset (CartPole-v1 RLDS) and synthetic benchmark data."""

from rlds_reverb.datasets.cartpole import default_data_dir, ensure_default_dataset, generate
from rlds_reverb.datasets.synthetic import make_synthetic_episodes

__all__ = ['default_data_dir', 'ensure_default_dataset', 'generate', 'make_synthetic_episodes']
