"""The gemm family's lowerer: C = A x B (row-major, f16/bf16 in, f32 accumulate, f16/bf16/f32 out).

    lower_gemm(spec, target, lane)          the ``rocke_aot.lowerers`` entry point "gemm"
      1. spec.geometry(target)            threads, wave grid, instruction, LDS (refuses early)
      2. lanes.require(...)               target + matrix capability, before any IR exists
      3. kernel(A, B, C, M, N, K)         1-D grid: ceil(M/bm) * ceil(N/bn) work-groups
                                          (GemmSpec.launch_formulas: the launch contract)
           entry (GemmLowering.build): the LDS tiles, the tile (tm, tn) from the work-group id
           (split-K: its K slice z first), then one of three pipelines:

               spec.wgmma ──────> lower_warpgroup.py   cp.async -> swizzled stages -> wgmma.mma_async
               spec.stages ─────> lower_async.py       cp.async -> LDS stages -> ldmatrix -> mma.sync
               otherwise ───────> lower_registers.py   global -> registers -> LDS -> fragments ->
                                                       fma / mfma / wmma / mma.sync (AMD matrix
                                                       paths: build_amd's interior + edge loops)

    lower_common.py   the state and IR helpers every pipeline shares (GemmLoweringBase)
Tile order (spec.group_m = G > 1): work-group g takes tile rows in groups of G: within a group,
      consecutive work-groups walk down G tile rows before the next column (Triton's grouped
      order), so the tiles in flight share A rows and B columns in L2.

The family half (spec.py, table.py, model.py, counts.py) imports none of these modules.
"""

from __future__ import annotations

from rocke_aot import lanes, mma
from rocke_aot.aot.lower.module import I16, LoweredKernel
from rocke_aot.aot.lower.nvptx import NvptxKernel
from rocke_aot.errors import CapabilityError
from rocke_aot.families.gemm.lower_common import c32
from rocke_aot.families.gemm.lower_registers import RegisterStaged
from rocke_aot.families.gemm.lower_warpgroup import WarpgroupPipeline, wgmma_mnemonic
from rocke_aot.families.gemm.spec import WGMMA_ALIGN, GemmSpec
from rocke_aot.targets import Target


class GemmLowering(WarpgroupPipeline, RegisterStaged):
    """The three pipelines behind one entry (module doc): build() picks one by the spec."""

    # -- the kernel ---------------------------------------------------------------------
    def build(self) -> None:
        s, kb = self.spec, self.kb
        params = kb.define_kernel(s.launch_formulas().args)
        if s.split_k > 1:
            self.A, self.B, self.C, self.W, m, n, k = params
        else:
            self.A, self.B, self.C, m, n, k = params
        self.M, self.N, self.K = self.S(m), self.S(n), self.S(k)
        stages = s.stages or (2 if s.double_buffer else 1)
        per = s.block_m * self.lda + s.b_tile_elems
        if s.wgmma:  # the swizzle atoms need 1024-byte alignment: the base rounded up inside the array
            # wgmma is sm_90's (the spec refuses it elsewhere): the module is NVPTX's
            assert isinstance(kb, NvptxKernel), "a wgmma spec lowers for NVPTX only"
            raw = kb.dynamic_shared_array("gemm_lds", I16, stages * per + WGMMA_ALIGN // 2, 2)
            addr = self.S(kb.shared_address(raw))
            pad = (self.S(c32(WGMMA_ALIGN)) - addr % WGMMA_ALIGN) % WGMMA_ALIGN  # bytes, 0 if aligned
            self.lds = self.gep(raw, pad // 2)
        elif s.dynamic_lds:
            self.lds = kb.dynamic_shared_array("gemm_lds", I16, stages * per, 2)
        else:
            self.lds = kb.shared_array("gemm_lds", I16, stages * per, 2)
        self.tid = self.S(kb.workitem_id())
        gid = self.S(kb.workgroup_id())
        if s.split_k > 1:  # the K slices of one tile are neighbours in launch order
            self.z, gid = gid % s.split_k, gid // s.split_k
        self.tile = gid
        tiles_n = (self.N + (s.block_n - 1)) // s.block_n
        if s.group_m == 1:  # row-major tiles
            self.row0 = (gid // tiles_n) * s.block_m
            self.col0 = (gid % tiles_n) * s.block_n
        else:
            tm, tn = self.grouped_tile(gid, tiles_n)
            self.row0, self.col0 = tm * s.block_m, tn * s.block_n
        ktiles = (self.K + (s.block_k - 1)) // s.block_k
        if s.wgmma:
            self.build_wgmma(ktiles)
            return
        if s.stages:
            self.build_async(ktiles)
            return
        self.build_registers(ktiles)


def lower_gemm(spec: GemmSpec, target: Target, lane: lanes.Lane) -> LoweredKernel:
    if not isinstance(spec, GemmSpec):
        raise TypeError(f"lower_gemm needs a GemmSpec, got {type(spec).__name__}")
    # Refuse on capability before the arch-dependent layout: gfx1250 on llvm20 names the op.
    lanes.require(lane, capability=f"target:{target.processor}", op=f"gemm for {target.id}")
    if spec.path != "fma":
        # mfma / wmma are AMDGPU instructions, mma (mma.sync) an NVPTX one
        if (spec.path == "mma") == target.is_amdgpu:
            raise CapabilityError(f"gemm path {spec.path} is not available on {target.processor}")
        instr = mma.select(target.processor, spec.path, spec.in_dtype, spec.mma)
        lanes.require(lane, capability=instr.capability, op=f"gemm {spec.path} ({instr.mnemonic_for(target.processor)})")
    if spec.stages:
        lanes.require(lane, capability="async-copy:sm_90", op=f"gemm stages={spec.stages} (cp.async + ldmatrix)")
    if spec.wgmma:
        lanes.require(lane, capability="wgmma:sm_90a", op="gemm wgmma (sm_90a wgmma.mma_async)")
    geo = spec.geometry(target)
    low = GemmLowering(spec, target, lane, geo)
    low.build()
    meta = {
        "path": spec.path,
        "instruction": (wgmma_mnemonic(spec) if spec.wgmma
                        else low.instr.mnemonic_for(target.processor) if low.instr else None),
        "block_m": spec.block_m, "block_n": spec.block_n, "stages": spec.stages, "group_m": spec.group_m,
        **({"wgmma": True} if spec.wgmma else {}),
        "geometry": {k: v for k, v in vars(geo).items()},
    }
    return low.kb.lowered("gemm", meta)


def paths_for(processor: str, in_dtype: str = "f16") -> tuple[str, ...]:
    """The gemm paths the lowering implements on a processor (lane capabilities aside)."""
    matrix = tuple(p for p in ("mfma", "wmma", "mma") if mma.shapes_for(processor, p, in_dtype))
    return matrix + ("fma",)
