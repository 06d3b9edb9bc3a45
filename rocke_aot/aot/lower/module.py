"""The target-neutral half of the lowering toolkit: module, types, kernel values.

    lower(family, spec, target, lane)                       (aot/lower/__init__.py)
        |
        v
    KernelModule(target, lane)  -- ir.Module with the triple and the lane PROFILE's datalayout
        |  .declare("mfma_f32_32x32x8f16")  -> ir.Function from profile.intrinsic(key)
        |  .require(capability=..., op=...)  -> lanes.require, before anything is emitted
        |  subclassed by AmdgpuKernel (amdgpu.py) and NvptxKernel (nvptx.py)
        v
    family lowerer fills the body through the KernelModule + IRBuilder + Sym index algebra
        |  control flow: .if_then(pred), .select_value(pred, a, b), .loop(trip, carried, body)
        |  memory: .define_kernel(spec.launch_formulas().args) (the family's ArgDefs, laid out
        |          by launch.natural_layout: one argument model from lowering to launch),
        |          .shared_array(...) (addrspace 3), .dynamic_shared_array(...) (sized at launch)
        |  values: .all_of(*preds), .bits_to_f32(bits, dtype) (a tensor element's raw bits)
        v
    .lowered(family, metadata) -> LoweredKernel (frozen): IR text, kernel name, ir_sha256,
                                  kernargs (launch.KernelArg), block size, LDS bytes, max_tensor_bytes
                                  (+ .launch, the LaunchContract, from aot/families)

Determinism: llvmlite numbers unnamed values per function in creation order, the module
name is the kernel name, attributes print sorted, and declarations are added in the
order the lowering asks for them; nothing here reads the clock, the environment or a
hash seed, so the same (family, spec, arch, lane) gives byte-identical IR text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import llvmlite.ir as ir

from rocke_aot import lanes
from rocke_aot.dtypes import MAX_TENSOR_BYTES
from rocke_aot.launch import ArgDef, KernelArg, LaunchContract, natural_layout
from rocke_aot.targets import Target

I1 = ir.IntType(1)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()

# Tensor offsets are computed in i32: the largest tensor a kernel may address, in bytes.


class BFloatType(ir.Type):
    """LLVM's ``bfloat`` (llvmlite.ir has no bf16 type). Only used for casts and operands."""

    null = "0.0"
    intrinsic_name = "bf16"

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash("bfloat")


BF16 = BFloatType()

_SCALARS: Mapping[str, ir.Type] = MappingProxyType(
    {"void": ir.VoidType(), "i1": I1, "i16": I16, "i32": I32, "i64": I64,
     "half": F16, "float": F32, "bfloat": BF16}
)
_VEC_RE = re.compile(r"^<(\d+) x ([a-z0-9]+)>$")


def parse_type(text: str) -> ir.Type:
    """The llvmlite type of a profile's type text ("<16 x float>", "i32", "ptr addrspace(3)",
    "{float, float}": a literal struct, what NVPTX mma.sync intrinsics return)."""
    text = text.strip()
    if text in _SCALARS:
        return _SCALARS[text]
    if text.startswith("{") and text.endswith("}"):
        return ir.LiteralStructType([parse_type(t) for t in text[1:-1].split(",")])
    m = _VEC_RE.match(text)
    if m and m.group(2) in _SCALARS:
        return ir.VectorType(_SCALARS[m.group(2)], int(m.group(1)))
    m = re.match(r"^ptr(?: addrspace\((\d+)\))?$", text)
    if m:
        return ir.PointerType(addrspace=int(m.group(1) or 0))
    raise ValueError(f"intrinsic type {text!r} is not one the lowering knows")


class KernelAttributes(ir.values.FunctionAttributes):
    """Function attributes that also accept LLVM string attributes (``"key"`` / ``"key"="v"``).

    llvmlite only knows enum attributes; AMDGPU kernels are described by string ones.
    They print sorted with the rest, so the header text is deterministic.
    """

    def add_string(self, key: str, value: str | None = None) -> None:
        if '"' in key or (value is not None and '"' in value):
            raise ValueError(f"attribute {key!r}={value!r} contains a quote")
        set.add(self, f'"{key}"' if value is None else f'"{key}"="{value}"')

    def add(self, name: str) -> None:  # keep llvmlite's validation for enum attributes
        super().add(name)


# LLVM type text of each argument kind / scalar dtype (both targets: global memory is
# addrspace(1) on amdgcn and nvptx64; u32 is an i32 in IR, its range is the contract's).
_LLVM_TYPES = {"global_pointer": "ptr addrspace(1)", "i32": "i32", "u32": "i32", "i64": "i64"}


def param_type(arg: ArgDef) -> str:
    """The LLVM type text of one kernel parameter."""
    return _LLVM_TYPES["global_pointer" if arg.kind == "global_pointer" else arg.dtype]


@dataclass(frozen=True)
class LoweredKernel:
    """The result of lowering one (family, spec, target, lane): IR text plus what it needs."""

    family: str
    kernel_name: str
    target: str  # canonical target ID
    lane: str
    profile: str
    ir: str
    ir_sha256: str
    kernargs: tuple[KernelArg, ...]  # the launch contract's arguments, laid out (natural_layout)
    block_size: int  # work-items (threads) per work-group, 1-D
    lds_bytes: int  # static LDS / shared memory the kernel allocates
    max_tensor_bytes: int = MAX_TENSOR_BYTES
    metadata: Mapping[str, Any] = field(default_factory=dict)  # family facts (path, instruction, geometry)
    # The launch contract (rocke_aot/launch.py): grid/block formulas and the kernel arguments
    # as data. Attached by aot/families' Family.lowerer from the spec's launch formulas; the
    # builder replaces its layout with the compiled code object's (checked equal).
    launch: LaunchContract | None = None
    # shared memory the launch must provide (dynamic_shared_array; the contract's
    # dynamic_shared_bytes): beyond the 48 KiB a kernel may declare statically on NVPTX
    dynamic_lds_bytes: int = 0

    @property
    def kernarg_size(self) -> int:
        last = self.kernargs[-1] if self.kernargs else None
        return 0 if last is None else last.offset + last.size

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family, "kernel_name": self.kernel_name, "target": self.target,
            "lane": self.lane, "profile": self.profile, "ir_sha256": self.ir_sha256,
            "kernargs": [a.as_dict() for a in self.kernargs], "kernarg_size": self.kernarg_size,
            "block_size": self.block_size, "lds_bytes": self.lds_bytes, "dynamic_lds_bytes": self.dynamic_lds_bytes,
            "max_tensor_bytes": self.max_tensor_bytes, "metadata": dict(self.metadata),
            "launch": self.launch.as_dict() if self.launch is not None else None,
        }


class Sym:
    """An i32 index expression that emits IR: the same ``//``, ``%``, ``*``, ``+`` (and ``^``, the
    swizzled layouts' chunk XOR) that the numpy layout models (mma.py, families/gemm/spec.py
    lds_a_index) evaluate on arrays, so one index-map function serves both.

    Values are non-negative by construction (thread ids, tile indices), so ``//``/``%`` by
    a power of two become shifts and masks; other constants use unsigned div/rem.
    """

    __slots__ = ("b", "v")

    def __init__(self, builder: ir.IRBuilder, value: ir.Value):
        self.b, self.v = builder, value

    def _c(self, x: Sym | int) -> ir.Value:
        return x.v if isinstance(x, Sym) else ir.Constant(I32, int(x))

    def __add__(self, o: Sym | int) -> Sym:
        if isinstance(o, int) and o == 0:
            return self
        return Sym(self.b, self.b.add(self.v, self._c(o)))

    __radd__ = __add__

    def __sub__(self, o: Sym | int) -> Sym:
        return Sym(self.b, self.b.sub(self.v, self._c(o)))

    def __mul__(self, o: Sym | int) -> Sym:
        if isinstance(o, int):
            if o == 1:
                return self
            if o > 0 and o & (o - 1) == 0:
                return Sym(self.b, self.b.shl(self.v, ir.Constant(I32, o.bit_length() - 1)))
        return Sym(self.b, self.b.mul(self.v, self._c(o)))

    __rmul__ = __mul__

    def __floordiv__(self, o: Sym | int) -> Sym:
        if isinstance(o, Sym):
            return Sym(self.b, self.b.udiv(self.v, o.v))
        if o == 1:
            return self
        if o > 0 and o & (o - 1) == 0:
            return Sym(self.b, self.b.lshr(self.v, ir.Constant(I32, o.bit_length() - 1)))
        return Sym(self.b, self.b.udiv(self.v, self._c(o)))

    def __mod__(self, o: Sym | int) -> Sym:
        if isinstance(o, Sym):
            return Sym(self.b, self.b.urem(self.v, o.v))
        if o > 0 and o & (o - 1) == 0:
            return Sym(self.b, self.b.and_(self.v, ir.Constant(I32, o - 1)))
        return Sym(self.b, self.b.urem(self.v, self._c(o)))

    def __xor__(self, o: Sym | int) -> Sym:
        return Sym(self.b, self.b.xor(self.v, self._c(o)))

    __rxor__ = __xor__

    def lt(self, o: Sym | int) -> ir.Value:
        return self.b.icmp_unsigned("<", self.v, self._c(o))


class KernelModule:
    """An ir.Module for one kernel on one (target, lane); subclasses add the target's ABI."""

    calling_convention = ""
    block_size: int  # work-items per work-group, 1-D (each target's constructor sets it)

    def __init__(self, name: str, target: Target, lane: lanes.Lane):
        self.target = target
        self.lane = lane
        self.profile = self.lane.profile
        self.require(capability=f"target:{self.target.processor}", op=f"kernel for {self.target.id}")
        self.name = name
        self.module = ir.Module(name=name)
        self.module.triple = self.profile.triple(self.target)  # llvm24: subarch triple
        self.module.data_layout = self.profile.datalayout(self.target.family)
        self._declared: dict[str, ir.Function] = {}
        self.kernel: ir.Function | None = None
        self.builder: ir.IRBuilder | None = None
        self.lds_bytes = 0
        self.dynamic_lds_bytes = 0

    # The target's ABI, which every subclass (amdgpu.AmdgpuModule, nvptx.NvptxModule) gives.
    def workitem_id(self) -> ir.Value:
        """This thread's index in its work-group (x)."""
        raise NotImplementedError(f"{type(self).__name__} has no work-item id")

    def workgroup_id(self) -> ir.Value:
        """This work-group's index in the grid (x)."""
        raise NotImplementedError(f"{type(self).__name__} has no work-group id")

    def barrier(self) -> None:
        """A work-group barrier."""
        raise NotImplementedError(f"{type(self).__name__} has no barrier")

    # A last arriver's inter-work-group protocol (NvptxKernel: inline PTX; AmdgpuKernel: LLVM IR's memory model)
    def fence_acq_rel_gpu(self) -> None:
        """A device-scope acquire-release fence."""
        raise NotImplementedError(f"{type(self).__name__} has no device-scope fence")

    def atomic_add_gpu(self, ptr: ir.Value, value: ir.Value) -> ir.Value:
        """A device-scope relaxed atomic add on an i32 in global memory; the old value."""
        raise NotImplementedError(f"{type(self).__name__} has no device-scope atomic")

    def last_arriver(self, first_thread: ir.Value, counter: ir.Value, flag: ir.Value,
                     last: Callable[[], ir.Value]) -> None:
        """The protocol itself (gemm's split-K, attention's split-KV): the work-group's first thread
        arrives on ``counter`` (fence, atomic add, fence) and leaves the old value in LDS at ``flag``;
        after a barrier every work-group but the one that saw ``last()`` (the count of the others,
        emitted after the load) returns. The partials stored before it are visible to the one that
        goes on."""
        b = self.ir_builder()
        with self.if_then(first_thread, "arrive"):
            self.fence_acq_rel_gpu()
            old = self.atomic_add_gpu(counter, ir.Constant(I32, 1))
            self.fence_acq_rel_gpu()
            b.store(old, flag, align=4)
        self.barrier()
        arrived = b.load(flag, typ=I32, align=4)
        with self.if_then(b.icmp_unsigned("!=", arrived, last()), "notlast"):
            b.ret_void()

    def store_cg_v4f32(self, ptr: ir.Value, vec: ir.Value) -> None:
        """16 bytes to global memory that another work-group reads after the protocol."""
        raise NotImplementedError(f"{type(self).__name__} has no v4f32 global store")

    def load_cg_v4f32(self, ptr: ir.Value) -> ir.Value:
        """16 bytes another work-group stored, after the protocol's acquire."""
        raise NotImplementedError(f"{type(self).__name__} has no v4f32 global load")

    def matrix_op(self, key: str, capability: str, op: str) -> ir.Function:
        """The target's matrix instruction ``key`` (capability checked for ``op``)."""
        raise NotImplementedError(f"{type(self).__name__} has no matrix instruction")

    def shuffle_xor(self, value: ir.Value, lane: ir.Value, mask: int) -> ir.Value:
        """``value`` as lane ``lane ^ mask`` of this wave holds it."""
        raise NotImplementedError(f"{type(self).__name__} has no lane shuffle")

    def ir_builder(self) -> ir.IRBuilder:
        """The builder of the kernel's body (define_kernel starts it)."""
        if self.builder is None:
            raise ValueError(f"{self.name}: define_kernel first; no kernel body is being built")
        return self.builder

    def kernel_function(self) -> ir.Function:
        """The kernel's function (define_kernel defines it)."""
        if self.kernel is None:
            raise ValueError(f"{self.name}: define_kernel first; no kernel is defined")
        return self.kernel

    def require(self, *, capability: str | None = None, min_lane: str | None = None, op: str) -> None:
        """Refuse ``op`` for this lane now, before any IR for it exists."""
        lanes.require(self.lane, capability=capability, min_lane=min_lane, op=op)

    def declare(self, key: str) -> ir.Function:
        """The intrinsic ``key`` exactly as the lane's profile declares it."""
        fn = self._declared.get(key)
        if fn is None:
            decl = self.profile.intrinsic(key)
            fty = ir.FunctionType(parse_type(decl.ret), [parse_type(p) for p in decl.params])
            fn = ir.Function(self.module, fty, decl.name)
            self._declared[key] = fn
        return fn

    def define_kernel(self, args: Sequence[ArgDef]) -> list[ir.Argument]:
        """Define the kernel with the family's arguments (its spec's ``launch_formulas().args``)
        as parameters and start its entry block; the kernarg layout is launch.natural_layout's,
        the one layout rule from lowering to launch."""
        args = tuple(args)
        fty = ir.FunctionType(ir.VoidType(), [parse_type(param_type(a)) for a in args])
        fn = ir.Function(self.module, fty, self.name)
        fn.calling_convention = self.calling_convention
        fn.attributes = KernelAttributes()
        for arg, a in zip(fn.args, args):
            arg.name = a.name
            if a.kind == "global_pointer":
                arg.add_attribute("noalias")
                if self.profile.has("ptr-captures-attr"):
                    arg.add_attribute("captures(none)")
        self.kernel = fn
        self.kernargs = natural_layout(args)
        self.builder = ir.IRBuilder(fn.append_basic_block("entry"))
        return list(fn.args)

    def shared_array(self, name: str, elem: ir.Type, count: int, elem_bytes: int, align: int = 16) -> ir.GlobalVariable:
        """Static work-group memory (LDS / shared), address space 3 on both targets."""
        gv = ir.GlobalVariable(self.module, ir.ArrayType(elem, count), name, addrspace=3)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ir.ArrayType(elem, count), ir.Undefined)
        gv.align = align
        # llvmlite types a global as a typed pointer; the IR is opaque-pointer IR, so address
        # it through an opaque ptr addrspace(3) like every other pointer (prints the same).
        gv.type = ir.PointerType(addrspace=3)
        self.lds_bytes = (self.lds_bytes + align - 1) // align * align + count * elem_bytes
        return gv

    def dynamic_shared_array(self, name: str, elem: ir.Type, count: int, elem_bytes: int) -> ir.GlobalVariable:
        """Work-group memory the launch sizes (``extern __shared__``: an external zero-length
        addrspace(3) array, 16-byte aligned); ``count`` elements are what the kernel indexes, and
        the launch contract asks for exactly those bytes (dynamic_shared_bytes)."""
        if self.dynamic_lds_bytes:
            raise ValueError(f"{self.name}: one dynamic shared array per kernel (they all start at 0)")
        gv = ir.GlobalVariable(self.module, ir.ArrayType(elem, 0), name, addrspace=3)
        gv.linkage = "external"
        gv.align = 16
        gv.type = ir.PointerType(addrspace=3)
        self.dynamic_lds_bytes = count * elem_bytes
        return gv

    @contextmanager
    def if_then(self, pred: ir.Value, name: str = "if") -> Iterator[None]:
        """``if (pred) { body }`` with short block names ("name", "name.end"; llvmlite numbers
        repeats): llvmlite's own if_then nests ".endif" suffixes, which grow with every guard."""
        b = self.ir_builder()
        then, after = b.append_basic_block(name), b.append_basic_block(f"{name}.end")
        b.cbranch(pred, then, after)
        b.position_at_end(then)
        yield
        if not b.block.is_terminated:
            b.branch(after)
        b.position_at_end(after)

    def select_value(self, pred: ir.Value, then_fn, else_fn, name: str = "sel") -> ir.Value:
        """``pred ? then_fn() : else_fn()`` where each arm emits its own code (branches + phi)."""
        b = self.ir_builder()
        t_blk, e_blk = b.append_basic_block(name), b.append_basic_block(f"{name}.else")
        join = b.append_basic_block(f"{name}.end")
        b.cbranch(pred, t_blk, e_blk)
        arms = []
        for blk, fn in ((t_blk, then_fn), (e_blk, else_fn)):
            b.position_at_end(blk)
            v = fn()
            arms.append((v, b.block))
            b.branch(join)
        b.position_at_end(join)
        phi = b.phi(arms[0][0].type)
        for v, blk in arms:
            phi.add_incoming(v, blk)
        return phi

    def loop(self, trip: Sym | int, carried: list[ir.Value], body, name: str = "loop") -> list[ir.Value]:
        """``for i in range(trip)`` with loop-carried values; returns their final values.

        ``body(i: Sym, values: list) -> list`` emits one iteration. A runtime loop keeps the
        IR small (LLVM's O3 unrolls what pays); constant trips are fine too.
        """
        b = self.ir_builder()
        pre = b.block
        head, blk, done = (b.append_basic_block(n) for n in (name, f"{name}.body", f"{name}.end"))
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I32, name=f"{name}.i")
        phis = [b.phi(v.type) for v in carried]
        limit = trip.v if isinstance(trip, Sym) else ir.Constant(I32, int(trip))
        b.cbranch(b.icmp_unsigned("<", iv, limit), blk, done)
        b.position_at_end(blk)
        new = body(Sym(b, iv), list(phis))
        if len(new) != len(phis):
            raise ValueError(f"loop body returned {len(new)} values for {len(phis)} carried")
        nxt = b.add(iv, ir.Constant(I32, 1))
        latch = b.block
        b.branch(head)
        iv.add_incoming(ir.Constant(I32, 0), pre)
        iv.add_incoming(nxt, latch)
        for phi, first, last in zip(phis, carried, new):
            phi.add_incoming(first, pre)
            phi.add_incoming(last, latch)
        b.position_at_end(done)
        return phis

    def sym(self, value: ir.Value) -> Sym:
        return Sym(self.ir_builder(), value)

    def all_of(self, *preds: ir.Value) -> ir.Value:
        """The AND of one or more i1 predicates (left to right)."""
        out = preds[0]
        for p in preds[1:]:
            out = self.ir_builder().and_(out, p)
        return out

    def bits_to_f32(self, bits: ir.Value, dtype: str) -> ir.Value:
        """An element as f32 from how it travels: f32 as is, f16 / bf16 as i16 raw bits."""
        b = self.ir_builder()
        if dtype == "f32":
            return bits
        if dtype == "f16":
            return b.fpext(b.bitcast(bits, F16), F32)
        # bf16 -> f32 is exact: the 16 bits are the high half of the f32.
        return b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)

    def finish(self) -> str:
        """Seal the kernel (target attributes) and return the IR text."""
        return str(self.module)

    def lowered(self, family: str, metadata: Mapping[str, Any] | None = None) -> LoweredKernel:
        """Finish the kernel and package it: what every family lowerer returns."""
        text = self.finish()
        return LoweredKernel(
            family=family, kernel_name=self.name, target=self.target.id, lane=self.lane.name,
            profile=self.profile.name, ir=text, ir_sha256=ir_sha256(text), kernargs=self.kernargs,
            block_size=self.block_size, lds_bytes=self.lds_bytes, max_tensor_bytes=MAX_TENSOR_BYTES,
            dynamic_lds_bytes=self.dynamic_lds_bytes,
            metadata=MappingProxyType(dict(metadata or {})),
        )


def ir_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
