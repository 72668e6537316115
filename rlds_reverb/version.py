"""The package version, in one place."""

__all__ = [
    '__version__',
]

__version__ = '0.3.0'
