"""rocke_aot.variants: families' specs and problems, variant tables, arch data, efficiency and time models.

Importing the layer registers the built-in families (variants/builtin.py) in the one family
registry (variants/families.py), so every entry point (CLI, service, builder, tests) sees the
same families without a lookup of its own.
"""

from rocke_aot.variants import builtin as _builtin  # noqa: F401  (registers the built-in families)
from rocke_aot.variants import triton_families as _triton_families  # noqa: F401  (the in-repo Triton families)
