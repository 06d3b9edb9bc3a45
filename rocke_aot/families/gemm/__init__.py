"""gemm, one folder: C = A x B (row-major, f16 / bf16 in, f32 accumulate, f16 / bf16 / f32 out).

    family half (no compiler, no rocke_aot.aot: what a service host loads)
    spec.py             GemmSpec: baked dtypes and tuning knobs, validated; geometry(target), the
                        launch formulas, the LDS layouts (lds_a_index / lds_b_index, swizzled on
                        the warpgroup pipeline) and the copy order the lowering and counts share
    table.py            the variant table: the knob grid per (arch, lane), every lane decided
    counts.py           what one block of each pipeline issues per K-tile (KernelCounts)
    model.py            accepts / efficiency / work / counts (variants/models.py's Model)
    reference.py        what a gemm computes (float64), for `bench --run-from-cache` to verify
    family.py           FAMILY: the ``rocke_aot.families`` entry point ``gemm``

    lowerer half (the shared lowering toolkit, rocke_aot/aot/lower; llvmlite)
    lower.py            lower_gemm: the ``rocke_aot.lowerers`` entry point ``gemm``; the kernel's
                        entry, then one of three pipelines:
    lower_registers.py    register-staged: global -> registers -> LDS (fma, mfma / wmma with the
                          AMD main loop, mma.sync at stages 0)
    lower_async.py        asynchronous (sm_90): cp.async stages, ldmatrix, mma.sync, split-K
    lower_warpgroup.py    warpgroup (sm_90a): swizzled stages read by wgmma.mma_async
    lower_common.py     the state and IR helpers the three share

The problem type (GemmProblem, variants/problems.py) is the matmul operation's, shared with
triton_matmul, whose kernel names this folder's reference as its own. Only the lower*.py modules import
rocke_aot.aot (.importlinter's family-half contract).
"""
