"""conv_dgrad_patch, one folder: dX of a patch embedding (stride == filter == P, no padding).

    dX[n, i*P + r, j*P + s, c] = sum_k dY[n, i, j, k] * W[k, r, s, c]    (zero where no patch covers)

    family half (no compiler, no rocke_aot.aot: what a service host loads)
    spec.py      ConvDgradPatchSpec: baked (dtype, C, P) and tuning knobs, validated;
                 geometry(target), the launch formulas (main and border blocks), the LDS
                 layout (padded rows on mma, B transposed on mfma / wmma) the lowering and counts share
    table.py     the variant table: the main job's patch embeddings x the knob grid, every lane
                 decided, the specs a lane's compiler spills refused by name
    counts.py    what one block issues per dY-channel chunk (KernelCounts)
    model.py     accepts / efficiency / work / counts (variants/models.py's Model)
    reference.py what it computes (float64), for `bench --run-from-cache` to verify against
    family.py    FAMILY: the ``rocke_aot.families`` entry point ``conv_dgrad_patch``

    lowerer half (the shared lowering toolkit, rocke_aot/aot/lower; llvmlite)
    lower.py     lower_conv_dgrad_patch: the ``rocke_aot.lowerers`` entry point
                 ``conv_dgrad_patch``: one GEMM dY x W[K, P*P*C] per block on the conv engine
                 both conv families share, the pixel shuffle in its epilogue, border blocks
                 zeroing what no patch covers

Shared with conv_direct_fwd and kept in the layers: the conv engine (aot/families/_conv_ir.py),
the conv spec toolkit (variants/conv.py) and the engine's counts (variants/counts.py
engine_static). Only lower.py imports rocke_aot.aot (.importlinter's family-half contract).
"""
