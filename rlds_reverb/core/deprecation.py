"""Deprecation: the 0.1 module paths and argument names keep working for one release.

Version 0.2 regrouped the package by role (see `rlds_reverb`'s docstring) and named the
invalid-episode option `on_invalid` everywhere. What users may have imported or passed
before keeps working until 0.3, with a `DeprecationWarning` that says what to use instead.

Old module paths are served by one import hook (`install_moved_module_finder`, installed by
`import rlds_reverb`) from the table `MOVED_MODULES`, so that no stub files clutter the
package: `import rlds_reverb.writers` gives a module holding the names `writers` held, each
taken from the module that owns it now. The public short names (`rlds_reverb.items`,
`rlds_reverb.tables`, ...) are the new modules themselves, without a warning.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = [
    'MOVED_MODULES',
    'PUBLIC_ALIASES',
    'REMOVED_IN',
]

REMOVED_IN = '0.3'

_WRITE_PUSH = 'rlds_reverb.write.push'
_PLANS = 'rlds_reverb.transform.plans'
_TABLE_INFO = 'rlds_reverb.serve.table_info'
_SEED = 'rlds_reverb.write.seed'
_CQL = 'rlds_reverb.examples.cql_dqn'

# Public short names: the same module objects, no warning.
PUBLIC_ALIASES: dict[str, str] = {
    'rlds_reverb.checkpoints': 'rlds_reverb.serve.checkpoints',
    'rlds_reverb.items': 'rlds_reverb.transform.items',
    'rlds_reverb.observers': 'rlds_reverb.write.observers',
    'rlds_reverb.priorities': 'rlds_reverb.learn.priorities',
    'rlds_reverb.sampling': 'rlds_reverb.learn.sampling',
    'rlds_reverb.tables': 'rlds_reverb.serve.tables',
}

# Old path -> the new module (renamed whole), or {name: the module that owns it now}.
MOVED_MODULES: dict[str, str | dict[str, str]] = {
    'rlds_reverb.types': 'rlds_reverb.core.types',
    'rlds_reverb.errors': 'rlds_reverb.core.errors',
    'rlds_reverb.specs': 'rlds_reverb.core.specs',
    'rlds_reverb.episodes': 'rlds_reverb.core.episodes',
    'rlds_reverb.loading': 'rlds_reverb.read.loading',
    'rlds_reverb.validation': 'rlds_reverb.check.validation',
    'rlds_reverb.stats': 'rlds_reverb.check.stats',
    'rlds_reverb.convert': 'rlds_reverb.transform.convert',
    'rlds_reverb.resume': 'rlds_reverb.write.resume',
    'rlds_reverb.writers': {
        'DEFAULT_MAX_IN_FLIGHT_ITEMS': _WRITE_PUSH,
        'DEFAULT_TIMEOUT_MS': _WRITE_PUSH,
        'ProgressFn': _WRITE_PUSH,
        'PushStats': _WRITE_PUSH,
        'push': _WRITE_PUSH,
        'push_rlds_to_reverb': _WRITE_PUSH,
        'PriorityFn': _PLANS,
        'count_items': _PLANS,
        'make_episode_plans': _PLANS,
        'connect': _TABLE_INFO,
    },
    'rlds_reverb.server': {
        'TablePreset': 'rlds_reverb.serve.tables',
        'make_table': 'rlds_reverb.serve.tables',
        'start_server': 'rlds_reverb.serve.server',
        'SeedOutcome': _SEED,
        'SeedResult': _SEED,
        'seed_server': _SEED,
    },
    'rlds_reverb.learner': {
        'CqlDqnAgent': _CQL,
        'LearnerConfig': _CQL,
        'TrainHistory': _CQL,
        'build_agent': _CQL,
        'evaluate_policy': _CQL,
        'items_to_transitions': _CQL,
        'make_eval_env': _CQL,
        'make_train_step': _CQL,
        'record_priorities': _CQL,
        'train': _CQL,
        'plot_training': 'rlds_reverb.examples.plots',
    },
    'rlds_reverb.demo': {
        'DEFAULT_OUTPUT_DIR': 'rlds_reverb.examples.demo',
        'QUICK_ITERATIONS': 'rlds_reverb.examples.demo',
        'SUMMARY_NAME': 'rlds_reverb.examples.demo',
        'run_demo': 'rlds_reverb.examples.demo',
        'make_config': 'rlds_reverb.examples.demo',
        'compute_behaviour_return': 'rlds_reverb.examples.demo',
        'add_demo_parser': 'rlds_reverb.cli.demo_command',
    },
    'rlds_reverb.cli_reverb': {
        'add_push_parser': 'rlds_reverb.cli.reverb_commands',
        'add_serve_parser': 'rlds_reverb.cli.reverb_commands',
        'EXIT_OK': 'rlds_reverb.cli.app',
        'EXIT_ERROR': 'rlds_reverb.cli.app',
        'EXIT_INVALID_DATA': 'rlds_reverb.cli.app',
        'main': 'rlds_reverb.cli.app',
    },
    'rlds_reverb.datasets': {
        'default_data_dir': 'rlds_reverb.examples.cartpole',
        'ensure_default_dataset': 'rlds_reverb.examples.cartpole',
        'generate': 'rlds_reverb.examples.cartpole',
        'make_synthetic_episodes': 'rlds_reverb.examples.synthetic',
    },
    'rlds_reverb.datasets.cartpole': 'rlds_reverb.examples.cartpole',
    'rlds_reverb.datasets.synthetic': 'rlds_reverb.examples.synthetic',
    'rlds_reverb.datasets.tfds_writer': 'rlds_reverb.storage.tfds_writer',
}


def _warn(message: str) -> None:
    # 1: here, 2: `create_module`, 3: the `import` line (warnings skips importlib's frames).
    warnings.warn(message, DeprecationWarning, stacklevel=3)


def describe_new_home(old: str) -> str:
    """Returns where the names of old module `old` live now, for messages."""
    target = MOVED_MODULES[old]
    if isinstance(target, str):
        return target
    return ', '.join(sorted(set(target.values())))


class _MovedModuleLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the 0.1 module paths from `MOVED_MODULES` and `PUBLIC_ALIASES`."""

    def find_spec(self, fullname, path, target=None):
        del path, target
        if fullname in MOVED_MODULES or fullname in PUBLIC_ALIASES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        name = spec.name
        if name in PUBLIC_ALIASES:
            return importlib.import_module(PUBLIC_ALIASES[name])
        _warn(
            f'{name} moved to {describe_new_home(name)} in rlds-reverb 0.2; the old import '
            f'path works until {REMOVED_IN}. Import from the new module(s) instead.'
        )
        target = MOVED_MODULES[name]
        if isinstance(target, str):
            return importlib.import_module(target)
        module = types.ModuleType(name, f'Deprecated: see {describe_new_home(name)}.')
        module.__path__ = []  # `rlds_reverb.datasets.cartpole` and the like import under it.
        for attribute, owner in target.items():
            setattr(module, attribute, getattr(importlib.import_module(owner), attribute))
        return module

    def exec_module(self, module):
        del module  # Everything happened in `create_module`.


def install_moved_module_finder() -> None:
    """Makes the 0.1 module paths importable (idempotent; `import rlds_reverb` calls it)."""
    if not any(isinstance(finder, _MovedModuleLoader) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleLoader())


def warn_renamed_argument(old: str, new: str, *, function: str) -> None:
    """Warns that `function`'s argument `old` is now called `new`."""
    warnings.warn(
        f'{function}({old}=...) is deprecated; pass {new}=... instead (the same values). '
        f'{old}= works until rlds-reverb {REMOVED_IN}.',
        DeprecationWarning,
        stacklevel=3,
    )


def make_moved_getattr(module: str, moved: dict[str, str]):
    """Returns a module `__getattr__` serving names that moved to other modules, with a warning.

    Args:
      module: The module's `__name__`.
      moved: Name -> the module that now owns it.

    Example:
      >>> __getattr__ = make_moved_getattr(__name__, {'connect': 'rlds_reverb.serve.table_info'})
    """

    def __getattr__(name: str):  # noqa: N807 (a module `__getattr__`, PEP 562)
        owner = moved.get(name)
        if owner is None:
            raise AttributeError(f'module {module!r} has no attribute {name!r}')
        warnings.warn(
            f'{module}.{name} moved to {owner}.{name} in rlds-reverb 0.2; the old name works '
            f'until {REMOVED_IN}.',
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(owner), name)

    return __getattr__
