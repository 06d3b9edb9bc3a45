"""rocke_aot.variants: families' specs and problems, variant tables, arch data, efficiency and time models.

Every family rocke-aot ships is a folder of rocke_aot/families/ declared through rocke-aot's own
entry points, found by the one family registry (variants/families.py) like a plugin's: lazily, on
the first lookup, so every entry point (CLI, service, builder, tests) sees the same families
without a lookup of its own.
"""

