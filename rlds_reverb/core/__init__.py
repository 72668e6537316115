"""The lowest layer: vocabulary, errors, argument checks, specs and whole-episode tensors.

Every other part of the package (and `adders`) builds on these modules; they import nothing
from the rest of `rlds_reverb`.
"""
