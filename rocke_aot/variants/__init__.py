"""rocke_aot.variants: families' specs and problems, variant tables, arch data, efficiency and time models.

Importing the layer registers the in-repo Triton families (variants/triton_families.py) in the
one family registry (variants/families.py); every other family rocke-aot ships is a folder of
rocke_aot/families/ declared through rocke-aot's own entry points and found by the registry like
a plugin's (lazily, on the first lookup), so every entry point (CLI, service, builder, tests)
sees the same families without a lookup of its own.
"""

from rocke_aot.variants import triton_families as _triton_families  # noqa: F401  (the in-repo Triton families)
