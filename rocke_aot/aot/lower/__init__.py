"""The lowering toolkit: spec -> deterministic LLVM IR for one (target, lane).

    lower("gemm", spec | spec dict, "gfx942", "llvm22") -> LoweredKernel
        families.get_family(name).lowerer(spec, Target, Lane)
            uses KernelModule (module.py) through AmdgpuKernel (amdgpu.py) / NvptxKernel
            (nvptx.py), matrix instruction layouts from mma.py, the datalayout and every
            intrinsic declaration from the lane's emission profile (rocke_aot/lanes.py)

The cache key's digest of this code is aot/recipe.py's recipe_digest(): every module on the
lowering and compile path, chosen by rule (this package is one of its roots).

Nothing here compiles: the IR text goes to a toolchain (aot/compiler). Refusals happen
here, before LLVM: an unknown family or malformed spec is a SpecError, an op the lane or
arch lacks is a CapabilityError naming the op.
"""

from __future__ import annotations

from rocke_aot.aot.lower.module import MAX_TENSOR_BYTES, KernelModule, LoweredKernel, Sym
from rocke_aot.lanes import Lane, get_lane
from rocke_aot.targets import Target

__all__ = ["lower", "kernel_for", "LoweredKernel", "KernelModule",
           "Sym", "MAX_TENSOR_BYTES"]

def lower(family: str, spec: object, target: Target | str, lane: Lane | str) -> LoweredKernel:
    """Lower one spec of ``family`` for ``target`` (Target or target ID) on ``lane``.

    The Python API's door: a target ID or lane name is parsed here, once; the lowerer below
    takes the Target and the Lane."""
    from rocke_aot.aot.families import get_family

    fam = get_family(family)
    lane = get_lane(lane)
    target = Target.parse(target)
    return fam.lowerer(fam.spec_from(spec), target, lane)


def kernel_for(name: str, target: Target, lane: Lane, block_size: int) -> KernelModule:
    """The kernel builder for ``target``: AmdgpuKernel (amdgcn) or NvptxKernel (sm_90).

    Takes the typed values a lowerer is given (parsed once, by lower() or the builder).
    Refuses (CapabilityError) a target the lane's profile lacks, before any IR exists.
    """
    from rocke_aot.aot.lower.amdgpu import AmdgpuKernel
    from rocke_aot.aot.lower.nvptx import NvptxKernel

    cls = AmdgpuKernel if target.is_amdgpu else NvptxKernel
    return cls(name, target, lane, block_size)
