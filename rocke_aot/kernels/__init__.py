"""Triton kernels shipped with rocke-aot (the in-repo Triton families, declared in
rocke_aot/families/triton_matmul/ and rocke_aot/families/triton_softmax/).

Each kernel module imports triton and nothing of rocke_aot but ``rocke_aot.kernels.configs``
(plain data), so it imports the same under a lane environment's interpreter (the build
worker), on a GPU host, and here; a @triton.jit function's cache key covers its source text
and line numbers, so the host's import and the builder's must be of the same file.
"""
