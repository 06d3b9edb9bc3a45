"""Families that ship with rocke-aot as plugins: one folder per family, found through the registry.

Each folder is shaped like a third-party plugin (examples/plugin-rowsoftmax, docs/plugins.md):
the family half (spec, problem, variant table with admission reasons, model, reference) in
modules that import no compiler, and the lowerer half in modules of their own. rocke-aot's own
pyproject.toml declares them under the same entry point groups a plugin uses
(``rocke_aot.families`` / ``rocke_aot.lowerers``): a built-in family here is simply a plugin that
ships with the package. No layer imports this package (``.importlinter``); the registry finds its
families by their entry points, and the recipe digest (aot/recipe.py) covers every module in it.

    attention/   SDPA forward (softmax(Q K^T * scale + mask) V): the problem, the numpy
                 reference, the native kernel ``attention`` and the Triton kernel ``triton_attention``
"""
