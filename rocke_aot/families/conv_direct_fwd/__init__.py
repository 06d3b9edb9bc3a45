"""conv_direct_fwd, one folder: NHWC forward convolution, direct (no im2col buffer).

    Y[n, oh, ow, k] = sum_{r, s, c} X[n, oh*u - p + r*d, ow*v - q + s*e, c] * W[k, r, s, c]

    family half (no compiler, no rocke_aot.aot: what a service host loads)
    spec.py      ConvDirectFwdSpec: baked layer (dtype, C, K, filter, stride, padding,
                 dilation) and tuning knobs, validated; geometry(target), the launch formulas,
                 the LDS layout (halo and weights) the lowering and counts share
    table.py     the variant table: the main job's layers x the knob grid, every lane decided
    counts.py    what one block issues per input-channel chunk (KernelCounts)
    model.py     accepts / efficiency / work / counts (variants/models.py's Model)
    reference.py what it computes (float64), for `bench --run-from-cache` to verify against
    family.py    FAMILY: the ``rocke_aot.families`` entry point ``conv_direct_fwd``

    lowerer half (the shared lowering toolkit, rocke_aot/aot/lower; llvmlite)
    lower.py     lower_conv_direct_fwd: the ``rocke_aot.lowerers`` entry point
                 ``conv_direct_fwd``: stages the input halo and the weights, then one tile GEMM
                 per filter tap on the conv engine both conv families share

Shared with conv_dgrad_patch and kept in the layers: the conv engine (aot/families/_conv_ir.py:
the tile GEMM on LDS operands, the AMD main loop), the conv spec toolkit (variants/conv.py:
ConvGeometry and the checks both specs start with) and the engine's counts (variants/counts.py
engine_static). Only lower.py imports rocke_aot.aot (.importlinter's family-half contract).
"""
