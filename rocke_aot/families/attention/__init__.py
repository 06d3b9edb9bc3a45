"""Attention (SDPA forward), one folder: softmax(Q K^T * scale + mask) V.

    problem.py        AttentionProblem: what a caller has (batch, lengths or variable lengths,
                      query and KV heads, head dim, dtype, causal, sliding window, scale, KV
                      layout, LSE); what no kernel serves is refused by name (REFUSED)
    reference.py      the numpy float64 reference written from the definition, and the error
                      bound of a correct kernel (the runner verifies every output against it)
    triton_kernel.py  the @triton.jit flash-attention forward kernel (imports triton only)
    triton.py         its declaration as a family (TritonKernel -> FAMILY): the family half,
                      what `rocke_aot.families` entry point ``triton_attention`` names

No module here imports a compiler or rocke_aot.aot: a service host loads the family half alone.
A Triton family's lowerer is the Triton kind's (aot/families/triton.py: a compile request), so
it declares no lowerer entry point of its own; a native attention family would add its lowerer
module here (``lower.py``) and its ``rocke_aot.lowerers`` entry point.
"""
