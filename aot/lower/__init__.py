"""The lowering toolkit: spec -> deterministic LLVM IR for one (target, lane).

    lower("gemm", spec | spec dict, "gfx942", "llvm22") -> LoweredKernel
        families.get_family(name).lowerer(spec, Target, Lane)
            uses KernelModule (module.py) through AmdgpuKernel (amdgpu.py) / NvptxKernel
            (nvptx.py), matrix instruction layouts from mma.py, the datalayout and every
            intrinsic declaration from the lane's emission profile (rocke_aot/lanes.py)
    lowering_digest() -> sha256 of the lowering source (cache-key input)

Nothing here compiles: the IR text goes to a toolchain (aot/compiler). Refusals happen
here, before LLVM: an unknown family or malformed spec is a SpecError, an op the lane or
arch lacks is a CapabilityError naming the op.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from rocke_aot.lanes import get_lane
from rocke_aot.aot.lower.module import (MAX_TENSOR_BYTES, KernArg, KernelModule, LoweredKernel,
                                        Sym)
from rocke_aot.targets import Target

__all__ = ["lower", "lowering_digest", "kernel_for", "LoweredKernel", "KernArg", "KernelModule",
           "Sym", "MAX_TENSOR_BYTES"]

_AOT = Path(__file__).resolve().parent.parent


def lower(family: str, spec: object, target: object, lane: object) -> LoweredKernel:
    """Lower one spec of ``family`` for ``target`` (Target or target ID) on ``lane``."""
    from rocke_aot.aot.families import get_family

    fam = get_family(family)
    lane = get_lane(lane)
    target = Target.parse(target)
    return fam.lowerer(fam.spec_from(spec), target, lane)


def kernel_for(name: str, target: object, lane: object, block_size: int) -> KernelModule:
    """The kernel builder for ``target``: AmdgpuKernel (amdgcn) or NvptxKernel (sm_90).

    Refuses (CapabilityError) a target the lane's profile lacks, before any IR exists.
    """
    from rocke_aot.aot.lower.amdgpu import AmdgpuKernel
    from rocke_aot.aot.lower.nvptx import NvptxKernel

    target = Target.parse(target)
    cls = AmdgpuKernel if target.is_amdgpu else NvptxKernel
    return cls(name, target, get_lane(lane), block_size)


def lowering_digest() -> str:
    """sha256 over the lowering source: aot/lower/*.py, aot/families/*.py and the modules
    defining each registered family's spec class (their geometry shapes the IR too).

    Any edit there changes the digest, so cache keys built with it go stale on purpose.
    """
    from rocke_aot.aot import families

    files = set(_AOT.joinpath("lower").glob("*.py")) | set(_AOT.joinpath("families").glob("*.py"))
    for name in families.families():
        files.add(Path(inspect.getsourcefile(families.get_family(name).spec_class)).resolve())
    h = hashlib.sha256()
    root = _AOT.parent
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
