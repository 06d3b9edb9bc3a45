"""A Triton kernel declared as a rocke-aot family from its own package (docs/triton-plugins.md).

    kernels.py   the @triton.jit function (imports triton only: the builder's Triton imports it)
    family.py    its declaration (TritonKernel -> triton_family -> FAMILY), the problem and the
                 reference (imports rocke-aot's base install only: a service host loads it)
"""
