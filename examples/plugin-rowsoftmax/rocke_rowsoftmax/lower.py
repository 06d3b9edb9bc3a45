"""The aot half of the rowsoftmax family: spec -> LLVM IR through rocke-aot's lowering toolkit.

    lower_rowsoftmax(spec, target, lane) -> LoweredKernel
      kernel(X, Y, R, C)    spec.launch_formulas().args: the one argument list (define_kernel)
      work-group r = row r; T = spec.threads work-items; red[T] f32 in LDS
      pass 1   m_t = max over c = t, t + T, ... < C of X[r, c]          (-inf where none)
               m   = tree max of m_t over LDS (log2 T rounds, a barrier each)
      pass 2   s_t = sum of exp2((X[r, c] - m) * log2 e)
               s   = tree sum; inv = 1 / s
      pass 3   Y[r, c] = exp2((X[r, c] - m) * log2 e) * inv   (converted to dtype)

    kernel_for(...) picks AmdgpuKernel (gfx*) or NvptxKernel (sm_90): the ids, the barrier, the
    ABI and the target attributes are the toolkit's; ``llvm.exp2.f32`` is a target-independent
    LLVM intrinsic both back ends select to one instruction (v_exp_f32, ex2.approx).
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower import LoweredKernel, Sym, kernel_for
from rocke_aot.aot.lower.module import BF16, F16, F32, I16
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_rowsoftmax.family import LOG2E, RowSoftmaxSpec

_ELEM = {"f32": F32, "f16": I16, "bf16": I16}  # how an element travels (16-bit types as raw bits)
_OUT = {"f32": F32, "f16": F16, "bf16": BF16}


def lower_rowsoftmax(spec: RowSoftmaxSpec, target: Target, lane: Lane) -> LoweredKernel:
    geo = spec.geometry(target)  # refuses a block that is not whole waves, before any IR
    T = geo.threads
    kb = kernel_for(spec.kernel_name, target, lane, T)
    X, Y, _R, C = kb.define_kernel(spec.launch_formulas().args)
    b = kb.builder
    e = DTYPE_BYTES[spec.dtype]
    elem = _ELEM[spec.dtype]
    exp2 = ir.Function(kb.module, ir.FunctionType(F32, [F32]), "llvm.exp2.f32")
    red = kb.shared_array("rowsoftmax_red", F32, T, 4)
    tid = kb.sym(kb.workitem_id())
    row = kb.sym(kb.workgroup_id())
    cols = kb.sym(C)
    base = row * cols
    passes = (cols + (T - 1)) // T

    def load(c: Sym) -> ir.Value:
        v = b.load(b.gep(X, [(base + c).v], source_etype=elem), typ=elem, align=e)
        return kb.bits_to_f32(v, spec.dtype)

    def shifted_exp(x: ir.Value, m: ir.Value) -> ir.Value:
        return b.call(exp2, [b.fmul(b.fsub(x, m), ir.Constant(F32, LOG2E))])

    def each_column(carried, fn, name):
        def body(i: Sym, acc):
            c = i * T + tid
            return [fn(c, acc[0])]
        return kb.loop(passes, carried, body, name)[0]

    def tree(value: ir.Value, op) -> ir.Value:
        slot = lambda k: b.gep(red, [k.v], source_etype=F32)  # noqa: E731
        b.store(value, slot(tid), align=4)
        kb.barrier()
        s = T // 2
        while s >= 1:
            with kb.if_then(tid.lt(s), "tree"):
                b.store(op(b.load(slot(tid), typ=F32, align=4), b.load(slot(tid + s), typ=F32, align=4)),
                        slot(tid), align=4)
            kb.barrier()
            s //= 2
        out = b.load(slot(kb.sym(ir.Constant(ir.IntType(32), 0))), typ=F32, align=4)
        kb.barrier()  # every thread has read red[0] before the next tree writes it
        return out

    neg_inf = ir.Constant(F32, float("-inf"))
    zero = ir.Constant(F32, 0.0)

    def fmax(a: ir.Value, x: ir.Value) -> ir.Value:
        return b.select(b.fcmp_ordered(">", a, x), a, x)

    # pass 1: the row's max
    m_t = each_column([neg_inf], lambda c, acc: fmax(acc, kb.select_value(
        c.lt(cols), lambda: load(c), lambda: neg_inf, "mx")), "max")
    m = tree(m_t, fmax)
    # pass 2: the sum of exp(x - max)
    s_t = each_column([zero], lambda c, acc: b.fadd(acc, kb.select_value(
        c.lt(cols), lambda: shifted_exp(load(c), m), lambda: zero, "ex")), "sum")
    inv = b.fdiv(ir.Constant(F32, 1.0), tree(s_t, b.fadd))

    # pass 3: the stores
    def store(c: Sym, acc: ir.Value) -> ir.Value:
        with kb.if_then(c.lt(cols), "st"):
            y = b.fmul(shifted_exp(load(c), m), inv)
            out = _OUT[spec.dtype]
            b.store(y if out is F32 else b.fptrunc(y, out), b.gep(Y, [(base + c).v], source_etype=out), align=e)
        return acc

    each_column([zero], store, "store")
    b.ret_void()
    return kb.lowered("rowsoftmax", {"threads": T, "passes": 3})
