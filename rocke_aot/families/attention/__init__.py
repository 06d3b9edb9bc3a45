"""Attention (SDPA forward), one folder: softmax(Q K^T * scale + mask) V.

    problem.py        AttentionProblem: what a caller has (batch, lengths or variable lengths,
                      query and KV heads, head dim, dtype, causal, sliding window, scale, KV
                      layout, LSE); what no kernel serves is refused by name (REFUSED)
    reference.py      the numpy float64 reference written from the definition, and the error
                      bound of a correct kernel (the runner verifies every output against it)
    triton_kernel.py  the @triton.jit flash-attention forward kernel (imports triton only)
    triton.py         its declaration as a family (TritonKernel -> FAMILY): the family half,
                      what `rocke_aot.families` entry point ``triton_attention`` names
    counts.py         triton_attention's instruction counts for the hardware time model
    native.py         ``attention``: the native kernel's family half (spec, table, model)
    lower.py          its lowerer half (the shared lowering toolkit; llvmlite): entry point
                      ``attention`` of ``rocke_aot.lowerers``

Only lower.py imports a compiler or rocke_aot.aot (.importlinter): a service host loads the family
half alone. A Triton family's lowerer is the Triton kind's (aot/families/triton.py: a compile
request), so triton_attention declares no lowerer entry point of its own.
"""
