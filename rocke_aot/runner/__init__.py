"""Running cached kernels on a GPU: ``rocke-aot bench --run-from-cache``.

    candidates (service.selection.select over a local store, or a server through the client)
        │ blob bytes + the artifact's launch contract (metadata["launch"])
        ▼
    runtime.open_runtime(target) ── CUDA (sm_90) | HIP (AMD) | RuntimeUnavailable (named skip)
        ▼
    pack kernel arguments at the contract's offsets, evaluate grid/block formulas,
    chunk the split axis past 2 GiB (chunk.py), launch, verify against a reference, time
    with device events

Nothing is compiled on this path.
"""
