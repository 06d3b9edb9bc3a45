"""triton_matmul, one folder: the in-repo Triton kernel's declaration as a family, C = A x B (GemmProblem).

    family.py    KERNEL (the TritonKernel) and FAMILY: the ``rocke_aot.families`` entry point
                 ``triton_matmul``, installed like any plugin's family; its lowerer is the Triton kind's
                 (aot/families/triton.py: a compile request), attached by kind

The @triton.jit source (rocke_aot/kernels/triton_matmul.py) and its configs (kernels/configs.py) stay in
rocke_aot/kernels/: the compile request a Triton kernel lowers to names its module and files, and
that request's sha256 is the code-object key, so moving them would move every stored key. Nothing
here imports rocke_aot.aot (.importlinter's family-half contract).
"""
