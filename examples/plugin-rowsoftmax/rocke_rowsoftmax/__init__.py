"""rocke-aot family plugin: the row-wise softmax.

    Y[r, c] = exp(X[r, c] - max_c X[r, :]) / sum_c exp(X[r, c] - max_c X[r, :])
    X, Y: rows x cols, row-major, dtype f32 / f16 / bf16 (math in f32)

    family.py   the variants half (entry point rocke_aot.families: rowsoftmax)
                RowSoftmaxSpec (dtype baked; threads tuned), RowSoftmaxProblem (rows, cols,
                dtype), ROWSOFTMAX_TABLE (the grid per arch and lane), MODEL (accepts,
                efficiency, work, counts), FAMILY
    lower.py    the aot half (entry point rocke_aot.lowerers: rowsoftmax)
                lower_rowsoftmax(spec, target, lane) -> LoweredKernel, through rocke-aot's
                lowering toolkit (AmdgpuKernel on gfx*, NvptxKernel on sm_90)

Nothing is imported here: a service host loads family.py alone (no llvmlite), a build host
also lower.py. docs/plugins.md in the rocke-aot repository explains each piece.
"""
