"""Run one family's problems with cached kernels: upload, launch (chunked), verify, time.

    for each problem:
        host inputs (runner/reference.inputs, or the family's own Reference.inputs for an index
        argument such as attention's block table; the same values for every candidate); a
        "workspace" argument (rocke_aot/launch.py) is a zero-filled buffer instead, never an input
        of the reference, and not advanced between chunks
        for each candidate (image bytes + its artifact's launch contract, in selection order):
            launches(contract, problem, device pointers)
                contract.plan(problem) fits max_tensor_bytes? -> one launch
                else split axis (contract.split_units) -> runner/chunk.plan_chunks -> one launch
                     per chunk on the sub-problem, split pointers advanced to the chunk
            verify: output poisoned first, every element finite and within the error bound of
                    runner/reference (float64 reference of the same inputs)
        time: every candidate that passed, together (Runtime.time_many): device events around
              each call, warm-up then repeats in interleaved rounds; the median of each, and
              TFLOP/s from the family's flop count
        vendor (CUDA with torch): torch.matmul / conv2d / conv2d_input on the same problem

Nothing here is per family but the reference (runner/reference.py semantics: a family's own
Reference, or the one of the family it names): the launch is data.
"""

from __future__ import annotations

import dataclasses
import statistics
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rocke_aot.errors import RockeError, SpecError
from rocke_aot.launch import LaunchContract, LaunchPlan
from rocke_aot.runner import reference as ref
from rocke_aot.runner.chunk import plan_chunks
from rocke_aot.runner.reference import reference_of
from rocke_aot.runner.runtime import PackedArgs, Runtime, interleaved_times

_SCALAR_FORMATS = {"i32": "<i", "u32": "<I", "i64": "<q"}


def pack(plan: LaunchPlan, pointers: Mapping[str, int]) -> PackedArgs:
    """The kernel-argument buffer: every argument at its contract offset, little-endian."""
    buf = bytearray(plan.kernarg_size)
    for a in plan.args:
        if a.kind == "global_pointer":
            if a.size != 8:
                raise SpecError(f"argument {a.name}: a global pointer is 8 bytes, the contract says {a.size}")
            struct.pack_into("<Q", buf, a.offset, pointers[a.name])
        else:
            fmt = _SCALAR_FORMATS.get(a.dtype)
            if fmt is None or struct.calcsize(fmt) != a.size:
                raise SpecError(f"argument {a.name}: no packing for scalar {a.dtype} of {a.size} bytes")
            struct.pack_into(fmt, buf, a.offset, a.value)
    return PackedArgs(bytes(buf), tuple(a.offset for a in plan.args))


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: PackedArgs


def launches(contract: LaunchContract, problem: Any, pointers: Mapping[str, int]) -> list[Launch]:
    """The launches that run ``problem``: one, or one per chunk of the split axis."""
    plan = contract.plan(problem)
    if not plan.over_limit:
        return [Launch(plan.grid, plan.block, pack(plan, pointers))]
    name, extent, units = contract.split_units(problem)
    out = []
    for chunk in plan_chunks(extent, units, contract.max_tensor_bytes):
        sub = dataclasses.replace(problem, **{name: chunk.count})
        p = contract.plan(sub)
        if p.over_limit:  # a tensor that does not grow with the split axis is itself too large
            raise SpecError(f"{contract.kernel}: {', '.join(p.over_limit)} exceed {contract.max_tensor_bytes} "
                            f"bytes even in a chunk of {name}={chunk.count}")
        moved = {n: ptr + chunk.byte_offset(units[n]) if n in units else ptr for n, ptr in pointers.items()}
        out.append(Launch(p.grid, p.block, pack(p, moved)))
    return out


@dataclass(frozen=True)
class LoadedKernel:
    """What the runner needs of one cached kernel (from a store or a server): its image and
    launch contract, plus the selection's rank. (Selection's candidate record is
    rocke_aot.candidates.Candidate; this is one loaded for running.)"""

    key: str
    kernel: str
    image: bytes
    contract: LaunchContract
    rank: int | None = None  # 0 = the selection's first choice
    efficiency: float | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    lane: str = ""
    estimate_ms: float | None = None  # the selection's time estimate (variants/perf.py)
    resources: Mapping[str, Any] | None = None  # code-object resources (registers, LDS, residency)


@dataclass
class RunResult:
    key: str
    kernel: str
    rank: int | None
    efficiency: float | None
    lane: str
    median_ms: float | None = None
    tflops: float | None = None
    chunks: int = 0
    verified: bool | None = None
    max_rel_err: float | None = None
    error: str | None = None
    estimate_ms: float | None = None  # what the selection predicted (bench/fit_perf.py fits on these runs)
    resources: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def timed_ms(r: RunResult) -> float:
    """The median of a result that ran and verified: ProblemReport's timed, best and top_ranked
    keep only those (median_ms set)."""
    assert r.median_ms is not None, "timed, best and top_ranked keep results with a median only"
    return r.median_ms


def _rank(r: RunResult) -> int:
    assert r.rank is not None, "top_ranked looks at ranked results only"
    return r.rank


@dataclass
class ProblemReport:
    family: str
    problem: dict[str, Any]
    results: list[RunResult]
    vendor_ms: float | None = None
    vendor: str | None = None

    @property
    def timed(self) -> list[RunResult]:
        return sorted((r for r in self.results if r.median_ms is not None and r.verified is not False),
                      key=timed_ms)

    @property
    def best(self) -> RunResult | None:
        return self.timed[0] if self.timed else None

    @property
    def top_ranked(self) -> RunResult | None:
        ranked = [r for r in self.results if r.rank is not None and r.median_ms is not None and r.verified is not False]
        return min(ranked, key=_rank) if ranked else None

    @property
    def selection_quality(self) -> float | None:
        """Best measured time over the top-ranked candidate's time (1.0: the ranking's first
        choice was the fastest)."""
        best, top = self.best, self.top_ranked
        return None if best is None or top is None else timed_ms(best) / timed_ms(top)

    def as_dict(self) -> dict[str, Any]:
        best, top = self.best, self.top_ranked
        return {"family": self.family, "problem": self.problem,
                "results": [r.as_dict() for r in self.results],
                "best": best.key if best else None, "top_ranked": top.key if top else None,
                "selection_quality": self.selection_quality,
                "vendor": self.vendor, "vendor_ms": self.vendor_ms,
                "best_over_vendor": (self.vendor_ms / timed_ms(best)) if best and self.vendor_ms else None}


class _Buffers:
    """Device buffers by (argument, dtype, elements), reused across candidates of a problem."""

    def __init__(self, rt: Runtime, rng_seed: int, problem: Any = None, sem: Any = None):
        self.rt, self.seed = rt, rng_seed
        self.problem, self.own = problem, getattr(sem, "inputs", None)  # the family's index inputs
        self.dev: dict[tuple[str, str, int], int] = {}
        self.values: dict[tuple[str, str, int], np.ndarray] = {}

    def input(self, name: str, dtype: str, count: int) -> int:
        k = (name, dtype, count)
        if k not in self.dev:
            rng = np.random.default_rng([self.seed, zlib.crc32(f"{name}:{dtype}".encode()), count & 0xFFFFFFFF])
            got = self.own(self.problem, name, dtype, count, rng) if self.own is not None else None
            bits, vals = got if got is not None else ref.inputs(dtype, count, rng)
            self.dev[k] = self.rt.alloc(bits.nbytes)
            self.rt.upload(self.dev[k], bits)
            self.values[k] = vals
        return self.dev[k]

    def workspace(self, name: str, dtype: str, count: int) -> int:
        """A workspace argument (launch.py "workspace"): one buffer per size, shared by the
        candidates of a problem (each leaves it as it found it), zero-filled again for every
        candidate that uses it, so one that failed cannot hand the next a dirty workspace."""
        k = (name, dtype, count)
        if k not in self.dev:
            self.dev[k] = self.rt.alloc(count * ref.storage_dtype(dtype).itemsize)
        self.rt.upload(self.dev[k], np.zeros(count * ref.storage_dtype(dtype).itemsize, dtype=np.uint8))
        return self.dev[k]

    def output(self, name: str, dtype: str, count: int) -> int:
        k = (name, dtype, count)
        if k not in self.dev:
            self.dev[k] = self.rt.alloc(count * ref.storage_dtype(dtype).itemsize)
        return self.dev[k]

    def free(self) -> None:
        for ptr in self.dev.values():
            self.rt.free(ptr)
        self.dev.clear()


def run_problem(rt: Runtime, family: str, problem: Any, candidates: Sequence[LoadedKernel], *,
                verify: bool = True, warmup: int = 2, reps: int = 10, seed: int = 0,
                vendor: bool = True, progress: Callable[[], None] | None = None) -> ProblemReport:
    """Every candidate loaded and (``verify``) checked one by one, then all that passed timed
    together in interleaved rounds (Runtime.time_many: no candidate is timed first after an
    idle GPU), then the vendor library."""
    sem = ref.semantics(family)
    bufs = _Buffers(rt, seed, problem, sem)
    report = ProblemReport(family, dataclasses.asdict(problem), [])
    refs: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    modules: list[Any] = []
    ready: list[tuple[RunResult, Callable[[], None]]] = []
    try:
        for cand in candidates:
            res = RunResult(cand.key, cand.kernel, cand.rank, cand.efficiency, cand.lane,
                            estimate_ms=cand.estimate_ms, resources=dict(cand.resources) if cand.resources else None)
            report.results.append(res)
            try:
                call = _prepare(rt, sem, family, problem, cand, bufs, refs, res, verify, modules)
                if call is not None:
                    ready.append((res, call))
            except RockeError as e:
                res.error = f"{type(e).__name__}: {e}"
        if ready:
            _time(rt, sem, problem, ready, warmup, reps)
        if progress:
            for _ in candidates:
                progress()
        if vendor:
            report.vendor, report.vendor_ms = _vendor(family, problem, rt, warmup, reps)
    finally:
        for module in modules:
            rt.unload(module)
        bufs.free()
    return report


def _time(rt: Runtime, sem, problem: Any, ready: list[tuple[RunResult, Callable[[], None]]], warmup: int,
          reps: int) -> None:
    try:
        times = rt.time_many([call for _, call in ready], warmup=warmup, reps=reps)
    except RockeError as e:  # a failed launch leaves the context unusable: no candidate's time counts
        for res, _ in ready:
            res.error = f"{type(e).__name__}: {e}"
        return
    flops = sem.flops(problem) if sem.flops is not None else None
    for (res, _), t in zip(ready, times):
        res.median_ms = statistics.median(t)
        res.tflops = flops / (res.median_ms * 1e-3) / 1e12 if flops and res.median_ms > 0 else None


def _prepare(rt, sem, family, problem, cand: LoadedKernel, bufs: _Buffers, refs, res: RunResult, verify,
             modules: list[Any]) -> Callable[[], None] | None:
    """The candidate loaded (its module kept in ``modules`` until the problem ends) and, with
    ``verify``, run once on a poisoned output and checked; the call that launches it, or None
    when it failed verification (``res`` says why)."""
    plan = cand.contract.plan(problem)
    pointers: dict[str, int] = {}
    out_arg = None
    access = {a.name: a.access for a in cand.contract.args}
    for a in plan.args:
        if a.kind != "global_pointer":
            continue
        if access[a.name] == "workspace":  # scratch: zero-filled, neither an input nor checked
            pointers[a.name] = bufs.workspace(a.name, a.dtype, a.value)
        elif a.name == sem.output:
            pointers[a.name] = bufs.output(a.name, a.dtype, a.value)
            out_arg = a
        else:
            pointers[a.name] = bufs.input(a.name, a.dtype, a.value)
    if out_arg is None:
        raise SpecError(f"{cand.kernel}: the contract has no output argument {sem.output!r}")
    todo = launches(cand.contract, problem, pointers)
    res.chunks = len(todo)
    module = rt.load(cand.image)
    modules.append(module)
    fn = rt.function(module, cand.contract.kernel)
    shared = cand.contract.dynamic_shared_bytes  # a Triton kernel's shared memory is dynamic
    if shared:
        rt.allow_dynamic_shared(fn, shared)

    def call() -> None:
        for ln in todo:
            rt.launch(fn, ln.grid, ln.block, ln.args, shared)

    if verify:
        poison = np.full(out_arg.nbytes, 0xFF, dtype=np.uint8)  # NaN in f32, f16 and bf16
        rt.upload(pointers[out_arg.name], poison)
        call()
        rt.synchronize()
        out = np.empty(out_arg.value, dtype=ref.storage_dtype(out_arg.dtype))
        rt.download(pointers[out_arg.name], out)
        got = ref.decode(out, out_arg.dtype)
        ins = tuple((a.name, a.dtype, a.value) for a in plan.args if a.kind == "global_pointer"
                    and a.name != sem.output and access[a.name] != "workspace")
        key = (out_arg.dtype, *ins)
        if key not in refs:
            vals = {n: bufs.values[(n, d, c)] for n, d, c in ins}
            refs[key] = sem.expected(problem, vals, out_arg.dtype)
        want, lim = refs[key]
        if want.size != got.size:
            raise SpecError(f"the reference of {family} gives {want.size} values; {cand.kernel} writes "
                            f"{got.size} into {out_arg.name}")
        err = np.abs(got - want)
        ok = np.isfinite(got) & (err <= lim)
        res.verified = bool(ok.all())
        res.max_rel_err = float((err / np.maximum(lim, 1e-300)).max()) if got.size else 0.0
        if not res.verified:
            bad = int((~ok).sum())
            res.error = f"{bad} of {got.size} outputs outside the error bound (or unwritten)"
            return None
    return call


def _vendor(family: str, p: Any, rt: Runtime, warmup: int, reps: int) -> tuple[str | None, float | None]:
    """The vendor library on the same problem (torch on CUDA), median milliseconds."""
    if rt.name != "cuda":
        return None, None
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.cuda.is_available():
        return None, None
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[p.dtype]
    d = "cuda"
    family = reference_of(family)
    if family == "gemm":
        a, b = torch.randn(p.m, p.k, device=d, dtype=dt), torch.randn(p.k, p.n, device=d, dtype=dt)
        name, fn = "torch.matmul", lambda: torch.matmul(a, b)
    elif family == "conv_direct_fwd":
        x = torch.randn(p.n, p.c, p.h, p.w, device=d, dtype=dt).to(memory_format=torch.channels_last)
        w = torch.randn(p.k, p.c, p.r, p.s, device=d, dtype=dt).to(memory_format=torch.channels_last)
        name, fn = "torch.nn.functional.conv2d", lambda: torch.nn.functional.conv2d(
            x, w, stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w), dilation=(p.dil_h, p.dil_w))
    elif family == "conv_dgrad_patch":
        import torch.nn.grad  # torch imports it itself; named so the type checker sees it

        hp, wp = p.h // p.p, p.w // p.p
        dy = torch.randn(p.n, p.k, hp, wp, device=d, dtype=dt).to(memory_format=torch.channels_last)
        w = torch.randn(p.k, p.c, p.p, p.p, device=d, dtype=dt)
        name, fn = "torch.nn.grad.conv2d_input", lambda: torch.nn.grad.conv2d_input(
            (p.n, p.c, p.h, p.w), w, dy, stride=p.p)
    elif _operation(family) == "attention":
        got = _sdpa_vendor(p, torch, dt, d)
        if got is None:
            return None, None
        fns = got
        name, fn = fns[0]
    else:
        return None, None
    # timed as the candidates are (runtime.interleaved_times: the warm-up floor, then each call
    # between its own events, enqueued back to back and read at the end), with torch's events on
    # torch's stream (run 15: a sync after each call measured torch.matmul 1.44x slow at 3072^3)

    def elapsed(s, e) -> float:
        e.synchronize()
        return s.elapsed_time(e)

    events = (lambda: torch.cuda.Event(enable_timing=True), lambda ev: ev.record(), elapsed)
    # the same hold as the candidates' (Runtime.hold), on torch's stream: torch's own spin kernel,
    # in clock cycles (2 GHz: at least ``ms`` at the H200's 1.98 GHz boost and any lower clock)
    sleep = getattr(torch.cuda, "_sleep", None)
    hold = (lambda ms: sleep(int(ms * 2e6))) if sleep is not None else None
    if _operation(family) == "attention":  # flash and cuDNN: the faster is the vendor
        runs = interleaved_times([f for _, f in fns], events, torch.cuda.synchronize, warmup=warmup, reps=reps,
                                 hold=hold)
        meds = [(statistics.median(t), n) for (n, _), t in zip(fns, runs)]
        best, name = min(meds)
        return name, best
    times = interleaved_times([fn], events, torch.cuda.synchronize, warmup=warmup, reps=reps, hold=hold)[0]
    return name, statistics.median(times)


def _operation(family: str) -> str:
    from rocke_aot.variants.families import get_family

    return get_family(family).op


def _sdpa_vendor(p: Any, torch: Any, dt: Any, d: str) -> list | None:
    """torch.nn.functional.scaled_dot_product_attention on the problem, one callable per backend
    that runs it (flash, cuDNN), or None where torch's SDPA cannot state the problem: a sliding
    window, paged KV or ragged lengths, or a causal mask with 1 < seqlen_q != seqlen_k (torch's
    is_causal aligns at the top left; the family's at the bottom right: equal when seqlen_q ==
    seqlen_k, and no mask at all for one query token)."""
    if p.window or p.kv_layout != "contiguous" or p.varlen:
        return None
    if p.causal and p.seqlen_q not in (1, p.seqlen_k):
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(p.batch, p.heads_q, p.seqlen_q, p.head_dim, device=d, dtype=dt)
    k = torch.randn(p.batch, p.heads_kv, p.seqlen_k, p.head_dim, device=d, dtype=dt)
    v = torch.randn(p.batch, p.heads_kv, p.seqlen_k, p.head_dim, device=d, dtype=dt)
    causal = p.causal and p.seqlen_q > 1
    gqa = p.heads_kv != p.heads_q
    out = []
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fn(backend=backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                        scale=p.softmax_scale, enable_gqa=gqa)
        try:
            fn()
            torch.cuda.synchronize()
        except RuntimeError:  # this backend does not take the problem (head dim, GQA, dtype)
            continue
        out.append((f"torch sdpa ({label})", fn))
    return out or None
