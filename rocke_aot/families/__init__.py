"""Families that ship with rocke-aot as plugins: one folder per family, found through the registry.

Each folder is shaped like a third-party plugin (examples/plugin-rowsoftmax, docs/plugins.md):
the family half (spec, problem, variant table with admission reasons, model, reference) in
modules that import no compiler, and the lowerer half in modules of their own. rocke-aot's own
pyproject.toml declares them under the same entry point groups a plugin uses
(``rocke_aot.families`` / ``rocke_aot.lowerers``): a built-in family here is simply a plugin that
ships with the package. No layer imports this package (``.importlinter``); the registry finds its
families by their entry points, and the recipe digest (aot/recipe.py) covers every module in it.

    gemm/              C = A x B: GemmSpec, its table, counts and model (the family half); lower.py
                       and one module per pipeline (register-staged, asynchronous, warpgroup)
    conv_direct_fwd/   NHWC forward convolution: spec, table, counts, model, reference, family; lower.py
    conv_dgrad_patch/  dX of a patch embedding: spec, table, counts, model, reference, family; lower.py
    attention/         SDPA forward (softmax(Q K^T * scale + mask) V): the problem, the numpy
                       reference, the native kernel ``attention`` and the Triton kernel
                       ``triton_attention``
    triton_matmul/     the in-repo Triton matmul declared as a family (family.py: KERNEL, FAMILY)
    triton_softmax/    the in-repo Triton row-wise softmax declared as a family

What several families share stays in the layers, where every family (a plugin's too) can use it:
the lowering toolkit (aot/lower), the conv engine both conv lowerers build on
(aot/families/_conv_ir.py) and the variants layer's spec, table, count and model helpers. A
shared module inside this package would be covered by no family's key (family_digest hashes one
family's own folder) and could not be imported by the lowering toolkit (no layer imports this
package).

The in-repo @triton.jit sources stay in rocke_aot/kernels/: a Triton compile request names the
kernel's module and files, and its sha256 is the code-object key, so moving them would move every
stored Triton kernel's key.
"""
