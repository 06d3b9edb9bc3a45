"""The compiler-lane registry: the only list of lanes and emission profiles.

A *lane* is a qualified compiler major (``llvm20`` .. ``llvm24``); it is chosen
by the LLVM major of the compiler that does code generation. An *emission
profile* is what the lowering emits for a lane: the datalayout per target, the
intrinsic declaration shapes and a capability set. Lanes and profiles are
distinct on purpose: several lanes may share one profile when their compilers
show no emission delta. ``llvm24`` has its own profile: characterizing the real
LLVM 24 (the triton wheel's AMDGPU code generator) found three deltas from the
LLVM 22 emission -- datalayout (address spaces 10..15), the subarch triple, and
xnack/sramecc as module flags (docs/llvm24-lane.md holds that evidence).

    LLVM major --lane_for_major--> Lane --profile_of--> Profile
    "--lane"/ROCKE_AOT_LANE/API ---get_lane-----^          |
                                                           +--> datalayout(target)
                                                           +--> has(capability)

Every surface (Python API, CLI, service, tests) resolves lanes through this
module. Anything not in ``LANES`` fails closed: an unknown name or a non-string
value is a :class:`LaneError` (a ``ValueError``), and an LLVM major with no lane
(15, 19, 21, 25, ...) is refused with the major, the toolchain and the
qualified lanes named. A newer major is never clamped to the newest lane.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rocke_aot import settings
from rocke_aot.boundedjson import is_int
from rocke_aot.errors import CapabilityError, LaneError

# Datalayouts as the real toolchains report them (llvmlite 0.46 / LLVM 20.1.8 and
# llvmlite 0.50 / LLVM 22.1.0, every wired arch gave the same string per target
# family). They are data the lowering emits, so they live here; the drift guard
# (aot/toolchains/drift.py) compares them with every available toolchain and refuses one
# that disagrees, so a hand-copy error cannot survive a test run.
_AMDGCN_DL_LLVM20 = (
    "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32"
    "-p7:160:256:256:32-p8:128:128-p9:192:256:256:32-i64:64-v16:16-v24:32"
    "-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048"
    "-n32:64-S32-A5-G1-ni:7:8:9"
)
_AMDGCN_DL_LLVM22 = (
    "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32"
    "-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32"
    "-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048"
    "-n32:64-S32-A5-G1-ni:7:8:9"
)
# LLVM 24.0.0git (triton 3.9.0's libtriton_amd_codegen.so, revision 6bc4aaf6641c-1), read
# from the module its target machine prints, identical for gfx90a/gfx942/gfx950/gfx1250 and
# for the plain and subarch triples: LLVM 22's string plus p10..p15 (docs/llvm24-lane.md).
_AMDGCN_DL_LLVM24 = (
    "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32"
    "-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-p10:32:32-p11:32:32-p12:32:32"
    "-p13:32:32-p14:32:32-p15:32:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256"
    "-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
)
_NVPTX_DL_LLVM20 = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
_NVPTX_DL_LLVM22 = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

# Capabilities a profile may hold. Operations and families ask for these (or
# for a minimum lane) instead of comparing lane names.
CAPABILITIES = MappingProxyType(
    {
        "target:gfx90a": "the code generator knows gfx90a",
        "target:gfx942": "the code generator knows gfx942",
        "target:gfx950": "the code generator knows gfx950",
        "target:gfx1250": "the code generator knows gfx1250 (LLVM 22 and newer)",
        "target:sm_90": "the NVPTX back end can target sm_90 with PTX 8.0",
        "mfma:f16": "gfx9 MFMA f16 intrinsics (llvm.amdgcn.mfma.f32.*f16)",
        "mfma:gfx950": "gfx950 MFMA (llvm.amdgcn.mfma.f32.32x32x16.f16/bf16, 16x16x32.f16/bf16)",
        "wmma:gfx1250": "gfx1250 WMMA (llvm.amdgcn.wmma.f32.16x16x32.f16/bf16)",
        "mma:sm_90": "NVPTX warp-level mma.sync m16n8k16 f16/bf16 -> f32 "
        "(llvm.nvvm.mma.m16n8k16.row.col.f32.f32 / .bf16; measured on LLVM 20.1 and 22.1)",
        "async-copy:sm_90": "NVPTX cp.async.cg 16-byte global -> shared copies with zero fill, their "
        "commit/wait groups, and ldmatrix m8n8 .x2/.x4 (.trans) b16 (sm_80+; "
        "llvm.nvvm.cp.async.* / llvm.nvvm.ldmatrix.*, measured selecting on LLVM 20.1 and 22.1)",
        "wgmma:sm_90a": "the NVPTX back end targets sm_90a (arch-specific sm_90: wgmma.mma_async, "
        "wgmma.fence/commit/wait, fence.proxy.async, written as inline PTX); measured selecting on LLVM 20.1 and 22.1",
        "ptr-captures-attr": "understands the captures(...) parameter attribute",
        "triple:amdgpu-subarch": "AMDGPU triples name the subarch (amdgpu9.50-amd-amdhsa for gfx950): "
        "LLVM 24 deprecates amdgcn-amd-amdhsa, LLVM 22 rejects the subarch form",
        "target-id:module-flags": "xnack/sramecc come from module flags !\"amdgpu.xnack\"/!\"amdgpu.sramecc\" "
        "(i32 0|1, absent = any), not subtarget features (LLVM 24 reports those as errors and ignores them)",
    }
)


@dataclass(frozen=True)
class IntrinsicDecl:
    """One intrinsic declaration shape a profile emits (types as LLVM IR text)."""

    name: str  # the LLVM symbol, e.g. "llvm.amdgcn.mfma.f32.32x32x8f16"
    ret: str  # "<16 x float>", "void", "i32"
    params: tuple[str, ...] = ()


def _decls(**shapes: tuple) -> Mapping[str, IntrinsicDecl]:
    # key -> (llvm name, return type, param types); keys are what the lowering asks for.
    return MappingProxyType({k: IntrinsicDecl(n, r, tuple(p)) for k, (n, r, p) in shapes.items()})


_MFMA_ARGS = ("i32", "i32", "i32")  # cbsz, abid, blgp
_INTRINSICS_COMMON = dict(
    workitem_id_x=("llvm.amdgcn.workitem.id.x", "i32", ()),
    workgroup_id_x=("llvm.amdgcn.workgroup.id.x", "i32", ()),
    s_barrier=("llvm.amdgcn.s.barrier", "void", ()),
    sched_barrier=("llvm.amdgcn.sched.barrier", "void", ("i32",)),
    # explicit counter waits (the backend's own waits then see the counter at 0): gfx9's one
    # s_waitcnt (immarg: its encoded counters), gfx12's one instruction per counter (immarg i16)
    s_waitcnt=("llvm.amdgcn.s.waitcnt", "void", ("i32",)),
    s_wait_dscnt=("llvm.amdgcn.s.wait.dscnt", "void", ("i16",)),
    s_wait_loadcnt=("llvm.amdgcn.s.wait.loadcnt", "void", ("i16",)),
    mfma_f32_32x32x8f16=("llvm.amdgcn.mfma.f32.32x32x8f16", "<16 x float>",
                         ("<4 x half>", "<4 x half>", "<16 x float>") + _MFMA_ARGS),
    mfma_f32_16x16x16f16=("llvm.amdgcn.mfma.f32.16x16x16f16", "<4 x float>",
                          ("<4 x half>", "<4 x half>", "<4 x float>") + _MFMA_ARGS),
    mfma_f32_32x32x8bf16_1k=("llvm.amdgcn.mfma.f32.32x32x8bf16.1k", "<16 x float>",
                             ("<4 x i16>", "<4 x i16>", "<16 x float>") + _MFMA_ARGS),
    mfma_f32_16x16x16bf16_1k=("llvm.amdgcn.mfma.f32.16x16x16bf16.1k", "<4 x float>",
                              ("<4 x i16>", "<4 x i16>", "<4 x float>") + _MFMA_ARGS),
    mfma_f32_32x32x16_f16=("llvm.amdgcn.mfma.f32.32x32x16.f16", "<16 x float>",
                           ("<8 x half>", "<8 x half>", "<16 x float>") + _MFMA_ARGS),
    mfma_f32_32x32x16_bf16=("llvm.amdgcn.mfma.f32.32x32x16.bf16", "<16 x float>",
                            ("<8 x bfloat>", "<8 x bfloat>", "<16 x float>") + _MFMA_ARGS),
    mfma_f32_16x16x32_f16=("llvm.amdgcn.mfma.f32.16x16x32.f16", "<4 x float>",
                           ("<8 x half>", "<8 x half>", "<4 x float>") + _MFMA_ARGS),
    mfma_f32_16x16x32_bf16=("llvm.amdgcn.mfma.f32.16x16x32.bf16", "<4 x float>",
                            ("<8 x bfloat>", "<8 x bfloat>", "<4 x float>") + _MFMA_ARGS),
    fmuladd_f32=("llvm.fmuladd.f32", "float", ("float", "float", "float")),
    exp2_f32=("llvm.exp2.f32", "float", ("float",)),  # the attention family's online softmax
    # a wave's cross-lane read (ds_bpermute_b32: lane i takes the value of lane addr / 4; the LDS
    # crossbar, no LDS memory): the attention family's row reductions on AMDGPU
    ds_bpermute=("llvm.amdgcn.ds.bpermute", "i32", ("i32", "i32")),
    # v_exp_f32 as it is (llvm.exp2.f32 scales inputs whose result would be an f32 denormal: three more
    # instructions an element; the softmax's exp2 of x <= 0 may flush those to 0) and v_max_f32
    amdgcn_exp2_f32=("llvm.amdgcn.exp2.f32", "float", ("float",)),
    maxnum_f32=("llvm.maxnum.f32", "float", ("float", "float")),
    tid_x=("llvm.nvvm.read.ptx.sreg.tid.x", "i32", ()),
    # NVPTX mma.sync m16n8k16, f32 accumulate. The f16 form is named by its D and C types
    # (".f32.f32"; ".f32.f16" is no intrinsic: LLVM emits it as an external call); the bf16 form
    # by its input type, with A and B as .b32 registers of two bf16 each. Both LLVM 20.1.8 and
    # 22.1.0 select mma.sync.aligned.m16n8k16.row.col.f32.{f16.f16,bf16.bf16}.f32 from these.
    mma_f32_16x8x16_f16=("llvm.nvvm.mma.m16n8k16.row.col.f32.f32", "{float, float, float, float}",
                         ("<2 x half>",) * 6 + ("float",) * 4),
    mma_f32_16x8x16_bf16=("llvm.nvvm.mma.m16n8k16.row.col.bf16", "{float, float, float, float}",
                          ("i32",) * 6 + ("float",) * 4),
    ctaid_x=("llvm.nvvm.read.ptx.sreg.ctaid.x", "i32", ()),
    # sm_80+ asynchronous copies and fragment loads (PTX ISA cp.async, ldmatrix); the same
    # names and shapes in LLVM 20.1 and 22.1 (the copy itself is inline PTX with the ignore-src
    # predicate: aot/lower/nvptx.py async_copy16_unless).
    cp_async_commit=("llvm.nvvm.cp.async.commit.group", "void", ()),
    cp_async_wait=("llvm.nvvm.cp.async.wait.group", "void", ("i32",)),  # immarg: groups left pending
    ldmatrix_x4=("llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16", "{i32, i32, i32, i32}", ("ptr addrspace(3)",)),
    ldmatrix_x4_trans=("llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16", "{i32, i32, i32, i32}",
                       ("ptr addrspace(3)",)),
    ldmatrix_x2_trans=("llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16", "{i32, i32}", ("ptr addrspace(3)",)),
    # warp shuffle (sm_30+): the async gemm's epilogue swaps output pairs inside a quad
    shfl_bfly_i32=("llvm.nvvm.shfl.sync.bfly.i32", "i32", ("i32", "i32", "i32", "i32")),
    trap=("llvm.trap", "void", ()),
)
# LLVM 21 replaced llvm.nvvm.barrier0 by llvm.nvvm.barrier.cta.sync.aligned.all(i32 id);
# LLVM 20 emits an external call for the new name, so each profile declares its own.
_INTRINSICS_LLVM20 = _decls(**_INTRINSICS_COMMON, barrier=("llvm.nvvm.barrier0", "void", ()))
_INTRINSICS_LLVM22 = _decls(
    **_INTRINSICS_COMMON,
    barrier=("llvm.nvvm.barrier.cta.sync.aligned.all", "void", ("i32",)),
    # gfx1250 WMMA: (neg_a, A, neg_b, B, c_mod, C, reuse_a, reuse_b), all modifiers immarg.
    wmma_f32_16x16x32_f16=("llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16", "<8 x float>",
                           ("i1", "<16 x half>", "i1", "<16 x half>", "i16", "<8 x float>", "i1", "i1")),
    wmma_f32_16x16x32_bf16=("llvm.amdgcn.wmma.f32.16x16x32.bf16.v8f32.v16bf16", "<8 x float>",
                            ("i1", "<16 x bfloat>", "i1", "<16 x bfloat>", "i16", "<8 x float>", "i1", "i1")),
)
# The implicit kernel inputs a kernel can disclaim ("amdgpu-no-*"), as the attributor of
# each LLVM infers them (measured with the O3 pipeline); the lowering states the ones a
# kernel does not use, so a code generator without the attributor (LLVM 24's) agrees.
_AMDGPU_NO_INPUTS_LLVM20 = (
    "completion-action", "default-queue", "dispatch-id", "dispatch-ptr", "flat-scratch-init",
    "heap-ptr", "hostcall-ptr", "implicitarg-ptr", "lds-kernel-id", "multigrid-sync-arg",
    "queue-ptr", "workgroup-id-x", "workgroup-id-y", "workgroup-id-z", "workitem-id-x",
    "workitem-id-y", "workitem-id-z",
)
_AMDGPU_NO_INPUTS_LLVM22 = _AMDGPU_NO_INPUTS_LLVM20 + ("cluster-id-x", "cluster-id-y", "cluster-id-z")


@dataclass(frozen=True)
class Profile:
    """What the lowering emits for the lanes that map to it."""

    name: str
    datalayouts: Mapping[str, str]  # target family ("amdgcn", "nvptx64") -> datalayout
    capabilities: frozenset[str]
    description: str = ""
    intrinsics: Mapping[str, IntrinsicDecl] = field(default_factory=dict)  # key -> declaration
    amdgpu_no_inputs: tuple[str, ...] = ()  # implicit inputs "amdgpu-no-<x>" can disclaim
    amdgpu_no_agpr: tuple[str, str | None] | None = None  # attribute for "no AGPRs" (name, value)

    def datalayout(self, family: str) -> str:
        try:
            return self.datalayouts[family]
        except KeyError:
            raise CapabilityError(
                f"emission profile {self.name!r} has no datalayout for target family "
                f"{family!r} (known: {', '.join(sorted(self.datalayouts))})"
            ) from None

    def intrinsic(self, key: str) -> IntrinsicDecl:
        try:
            return self.intrinsics[key]
        except KeyError:
            raise CapabilityError(
                f"emission profile {self.name!r} declares no intrinsic {key!r}"
            ) from None

    def triple(self, target) -> str:
        """The target triple this profile emits for ``target`` (a targets.Target)."""
        if target.is_amdgpu and "triple:amdgpu-subarch" in self.capabilities:
            return amdgpu_subarch_triple(target.processor)
        return target.triple

    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}")
        return capability in self.capabilities


@dataclass(frozen=True, order=True)
class Lane:
    """A qualified compiler major. Ordered by LLVM major."""

    major: int
    name: str = field(compare=False)
    profile_name: str = field(compare=False)

    @property
    def profile(self) -> Profile:
        return PROFILES[self.profile_name]

    def __str__(self) -> str:
        return self.name


_NVPTX = frozenset({"target:sm_90", "mma:sm_90", "async-copy:sm_90", "wgmma:sm_90a"})  # what an AMDGPU-only lane lacks
_COMMON = frozenset({"target:gfx90a", "target:gfx942", "target:gfx950", "mfma:f16", "mfma:gfx950"}) | _NVPTX

PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "llvm20": Profile(
            "llvm20",
            MappingProxyType({"amdgcn": _AMDGCN_DL_LLVM20, "nvptx64": _NVPTX_DL_LLVM20}),
            _COMMON,
            "LLVM 20: no gfx1250, no WMMA for gfx1250",
            _INTRINSICS_LLVM20, _AMDGPU_NO_INPUTS_LLVM20, ("amdgpu-no-agpr", None),
        ),
        "llvm22": Profile(
            "llvm22",
            MappingProxyType({"amdgcn": _AMDGCN_DL_LLVM22, "nvptx64": _NVPTX_DL_LLVM22}),
            _COMMON | {"target:gfx1250", "wmma:gfx1250", "ptr-captures-attr"},
            "LLVM 22: adds gfx1250 and its WMMA; new datalayout (m:e, p8 index width)",
            _INTRINSICS_LLVM22, _AMDGPU_NO_INPUTS_LLVM22, ("amdgpu-agpr-alloc", "0"),
        ),
        # Characterized on AMD's LLVM 23 (rocm-bindings-compiler's libLLVM.so; docs/llvm23-lane.md):
        # LLVM 22's datalayout, plain triple (the subarch form is refused), xnack/sramecc as
        # subtarget features, the same intrinsic shapes and availability and amdgpu-no-* inputs,
        # so the AMDGPU emission is LLVM 22's exactly (the goldens' IR hashes are equal). Its own
        # profile only because the capability set differs: AMDGPU only (the library has no NVPTX).
        "llvm23": Profile(
            "llvm23",
            MappingProxyType({"amdgcn": _AMDGCN_DL_LLVM22}),
            (_COMMON - _NVPTX) | {"target:gfx1250", "wmma:gfx1250", "ptr-captures-attr"},
            "LLVM 23 (AMD's): LLVM 22's AMDGPU emission; AMDGPU only (no NVPTX back end)",
            _INTRINSICS_LLVM22, _AMDGPU_NO_INPUTS_LLVM22, ("amdgpu-agpr-alloc", "0"),
        ),
        # Characterized on the real LLVM 24 (docs/llvm24-lane.md): the same intrinsic shapes and
        # amdgpu-no-* inputs as LLVM 22; AMDGPU only (the LLVM 24 code generator has no NVPTX).
        "llvm24": Profile(
            "llvm24",
            MappingProxyType({"amdgcn": _AMDGCN_DL_LLVM24}),
            (_COMMON - _NVPTX)
            | {"target:gfx1250", "wmma:gfx1250", "ptr-captures-attr", "triple:amdgpu-subarch",
               "target-id:module-flags"},
            "LLVM 24: datalayout adds p10..p15; subarch triples; xnack/sramecc as module flags",
            _INTRINSICS_LLVM22, _AMDGPU_NO_INPUTS_LLVM22, ("amdgpu-agpr-alloc", "0"),
        ),
    }
)

# The qualified lanes, oldest first. This tuple is the only list of lanes.
LANES: tuple[Lane, ...] = (
    Lane(20, "llvm20", "llvm20"),
    Lane(22, "llvm22", "llvm22"),
    Lane(23, "llvm23", "llvm23"),
    Lane(24, "llvm24", "llvm24"),
)
_BY_NAME: Mapping[str, Lane] = MappingProxyType({lane.name: lane for lane in LANES})
_BY_MAJOR: Mapping[int, Lane] = MappingProxyType({lane.major: lane for lane in LANES})

LANE_NAMES: tuple[str, ...] = tuple(lane.name for lane in LANES)


def amdgpu_subarch_triple(processor: str) -> str:
    """gfx950 -> amdgpu9.50-amd-amdhsa, gfx90a -> amdgpu9.0a-..., gfx1250 -> amdgpu12.50-...

    The rule LLVM 24 states in its deprecation warning; the characterization checks it against
    the triple the real LLVM 24 asks for on every wired arch.
    """
    import re

    m = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", processor)
    if not m:
        raise CapabilityError(f"{processor!r} is not an AMDGPU processor name (gfx<major><minor><stepping>)")
    return f"amdgpu{m.group(1)}.{m.group(2)}{m.group(3)}-amd-amdhsa"


def _qualified() -> str:
    return ", ".join(f"{lane.name} (LLVM {lane.major})" for lane in LANES)


def lane_for_major(major: int, toolchain: str = "an unnamed toolchain") -> Lane:
    """The lane of a compiler whose LLVM major is ``major``; fail closed otherwise."""
    if not is_int(major):
        raise LaneError(f"LLVM major must be an int, got {type(major).__name__} {major!r} from {toolchain}")
    lane = _BY_MAJOR.get(major)
    if lane is None:
        newest = LANES[-1]
        hint = (
            f"; LLVM {major} is newer than the newest qualified lane {newest.name} and is not "
            f"clamped to it: qualify it first"
            if major > newest.major
            else ""
        )
        raise LaneError(
            f"LLVM major {major} from {toolchain} has no qualified compiler lane "
            f"(qualified: {_qualified()}){hint}"
        )
    return lane


def get_lane(value: object, source: str = "lane") -> Lane:
    """Validate an explicit lane (a name, or a Lane). ``source`` names where it came from."""
    if isinstance(value, Lane):
        if _BY_NAME.get(value.name) != value:
            raise LaneError(f"{source}: {value!r} is not a registered lane")
        return value
    if not isinstance(value, str):
        raise LaneError(
            f"{source}: a lane must be a string such as 'llvm22', got {type(value).__name__} {value!r}"
        )
    lane = _BY_NAME.get(value)
    if lane is None:
        raise LaneError(f"{source}: unknown compiler lane {value!r}; qualified lanes: {_qualified()}")
    return lane


def lane_from_env(env: Mapping[str, str] | None = None) -> Lane | None:
    """The lane named by ``ROCKE_AOT_LANE``, validated; ``None`` only when it is unset."""
    env = os.environ if env is None else env
    if settings.LANE not in env:
        return None
    value = env[settings.LANE]
    if value == "":
        raise LaneError(f"{settings.LANE} is set but empty; unset it or name a lane ({_qualified()})")
    return get_lane(value, source=settings.LANE)


def resolve_lane(explicit: object = None, env: Mapping[str, str] | None = None) -> Lane | None:
    """An explicit lane wins over ``ROCKE_AOT_LANE``; both are validated.

    ``explicit=None`` means "not given"; any other non-string value is an error.
    """
    if explicit is not None:
        return get_lane(explicit)
    return lane_from_env(env)


def profile_of(lane: Lane | str) -> Profile:
    return get_lane(lane).profile


def lanes_for_profile(profile: str) -> tuple[Lane, ...]:
    if profile not in PROFILES:
        raise LaneError(f"unknown emission profile {profile!r}; profiles: {', '.join(PROFILES)}")
    return tuple(lane for lane in LANES if lane.profile_name == profile)


def require(lane: Lane | str, *, capability: str | None = None, min_lane: str | None = None, op: str) -> None:
    """Refuse lowering ``op`` for ``lane`` when it lacks a capability or is below a minimum lane."""
    lane = get_lane(lane)
    if min_lane is not None:
        floor = get_lane(min_lane, source=f"minimum lane of {op}")
        if lane < floor:
            raise CapabilityError(f"{op} needs compiler lane {floor.name} or newer; lane is {lane.name}")
    if capability is not None and not lane.profile.has(capability):
        raise CapabilityError(
            f"{op} needs capability {capability!r} ({CAPABILITIES[capability]}), which emission "
            f"profile {lane.profile.name!r} of lane {lane.name} lacks"
        )


def _check_registry() -> None:
    # Every lane names a real profile; every profile capability is known. Checked at import
    # so a bad edit to this table fails loudly everywhere.
    for lane in LANES:
        if lane.profile_name not in PROFILES:
            raise RuntimeError(f"lane {lane.name} maps to unknown profile {lane.profile_name}")
    for profile in PROFILES.values():
        unknown = profile.capabilities - set(CAPABILITIES)
        if unknown:
            raise RuntimeError(f"profile {profile.name} has unknown capabilities {sorted(unknown)}")


_check_registry()
