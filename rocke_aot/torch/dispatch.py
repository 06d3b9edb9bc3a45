"""The shape table and the cached launch path behind rocke_aot.torch's ops (no torch import).

    problem_of(op, ...)  -> (family, problem) or Unserved(reason, build=False): a torch call
                            as a family's problem (GemmProblem, ConvProblem, PatchDgradProblem, the
                            attention family's problem when that family is registered)
    Dispatcher(source, runtime_for, arch_for, lanes, policy)
        .path(family, problem, device) -> LaunchPath | Unserved
            once per new (device, family, problem): source.ranked (measured times first, the
            time model otherwise: the ranking's own rule), the first candidate loaded
            (source.load: the host's verified local store, filled from the mirror or service),
            its module loaded and function found (once per kernel, whatever shapes it serves),
            the plan made and argument buffers laid out
            (LaunchPath); a shape nothing serves is remembered too (Unserved, with its reason)
        .served / .fallbacks      counts per op, and per (op, reason)
        .miss(op, family, problem, unserved) strict: NotServedError naming the problem and the
                                  `rocke-aot build` command that serves it; report: counted
    LaunchPath(rt, kernel, problem)
        steps: one per launch (runner/run.py launches: one, or one per chunk of the split axis),
        each a ctypes argument buffer packed ONCE by runner/run.py pack (scalars, and each
        pointer's offset into its chunk) and the kernelParams array into it; a call writes only
        the pointers (base + the chunk's offset) and launches on the given stream
        (Runtime.launch_params). Workspace arguments: bytes the caller allocates zero-filled once
        per path (the launch contract's rule) and passes like any pointer.
        .bind(order, fixed)   once per path (ops.py, on its first call): the pointers that never
                              change (the workspace's) written into the buffers for good, the rest
                              by position in ``order`` (the family's OPERANDS)
        .launch(ptrs, stream) the hot path: ``ptrs`` a tuple in that order, two tuple reads and one
                              pack per pointer and step, the call counted with a plain int (calls);
        .run(ptrs, stream)    the same (bind() makes it one closure for a one-launch path)
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocke_aot.errors import NotServedError, RockeError, SpecError
from rocke_aot.runner.run import LoadedKernel, launches
from rocke_aot.targets import Target
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem

POLICIES = ("strict", "report")
OPS = {"linear": "gemm", "conv2d": "conv_direct_fwd", "conv_dgrad_patch": "conv_dgrad_patch", "sdpa": "attention"}
# The pointer arguments each op hands its kernel, by the family's launch-contract names.
OPERANDS = {"gemm": ("A", "B", "C"), "conv_direct_fwd": ("X", "Wt", "Y"),
            "conv_dgrad_patch": ("dY", "Wt", "dX"), "attention": ("Q", "K", "V", "O")}
NO_CANDIDATE = "no candidate in the cache"
OP_OF = {family: op for op, family in OPS.items()}
_PACK = struct.Struct("<Q").pack_into


@dataclass(frozen=True)
class Unserved:
    """Why a call does not run on a prebuilt kernel; ``build``: a `rocke-aot build` would serve it."""

    reason: str
    build: bool = False


def _dtype(name: str) -> str | Unserved:
    return name if name in ("f16", "bf16", "f32") else Unserved(f"dtype {name} (the kernels take f16, bf16, f32)")


def linear_problem(x_shape: Sequence[int], w_shape: Sequence[int], dtype: str) -> GemmProblem | Unserved:
    """F.linear(x, w): C[m, n] = A[m, k] x B[k, n] with A = x as (prod(lead), in), B = w^T: the
    gemm's B is K x N row-major and a linear's weight is (out, in) row-major, i.e. N x K, so the
    op passes a transposed copy of the weight (made once per weight version, ops.py)."""
    dt = _dtype(dtype)
    if isinstance(dt, Unserved):
        return dt
    if len(w_shape) != 2 or len(x_shape) < 1 or x_shape[-1] != w_shape[1]:
        return Unserved(f"shapes x {tuple(x_shape)} / weight {tuple(w_shape)} are not a linear")
    m = math.prod(x_shape[:-1])
    if m == 0:
        return Unserved("an empty input")
    try:
        return GemmProblem(m=int(m), n=int(w_shape[0]), k=int(w_shape[1]), dtype=dt, out_dtype=dt)
    except SpecError as e:
        return Unserved(str(e))


def pair2(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv2d_problem(x_shape: Sequence[int], w_shape: Sequence[int], stride: Any, padding: Any, dilation: Any,
                   groups: int, dtype: str) -> ConvProblem | Unserved:
    """F.conv2d on NCHW x and (k, c, r, s) weights; the kernel reads NHWC / KRSC (channels_last)."""
    dt = _dtype(dtype)
    if isinstance(dt, Unserved):
        return dt
    if groups != 1:
        return Unserved(f"groups={groups} (conv_direct_fwd is a dense convolution)")
    if isinstance(padding, str):
        return Unserved(f"padding={padding!r} (give the padding as numbers)")
    if len(x_shape) != 4 or len(w_shape) != 4 or x_shape[1] != w_shape[1]:
        return Unserved(f"shapes x {tuple(x_shape)} / weight {tuple(w_shape)} are not a batched 2-D convolution")
    (sh, sw), (ph, pw), (dh, dw) = pair2(stride), pair2(padding), pair2(dilation)
    n, c, h, w = (int(v) for v in x_shape)
    try:
        return ConvProblem(n=n, h=h, w=w, c=c, k=int(w_shape[0]), r=int(w_shape[2]), s=int(w_shape[3]),
                           stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, dtype=dt)
    except SpecError as e:
        return Unserved(str(e))


def dgrad_patch_problem(input_size: Sequence[int], w_shape: Sequence[int], dy_shape: Sequence[int],
                        dtype: str) -> PatchDgradProblem | Unserved:
    """dX of a patch layer (stride == filter == p, no padding): dY (n, k, h//p, w//p), weights
    (k, c, p, p) -> dX (n, c, h, w); the kernel reads NHWC dY and KRSC weights."""
    dt = _dtype(dtype)
    if isinstance(dt, Unserved):
        return dt
    if len(w_shape) != 4 or w_shape[2] != w_shape[3] or len(input_size) != 4:
        return Unserved(f"weight {tuple(w_shape)} is not a square patch filter")
    n, c, h, w = (int(v) for v in input_size)
    p = int(w_shape[2])
    if tuple(dy_shape) != (n, int(w_shape[0]), h // p, w // p) or c != w_shape[1]:
        return Unserved(f"dY {tuple(dy_shape)} / weight {tuple(w_shape)} / input {tuple(input_size)} "
                        f"are not a patch layer of stride {p}")
    try:
        return PatchDgradProblem(n=n, h=h, w=w, c=c, k=int(w_shape[0]), p=p, dtype=dt)
    except SpecError as e:
        return Unserved(str(e))


def sdpa_problem(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int], *, has_mask: bool,
                 dropout_p: float, is_causal: bool, scale: float | None, dtype: str,
                 families: Callable[[], Mapping[str, Any]]) -> Any:
    """F.scaled_dot_product_attention on (B, H, S, D) tensors as the attention family's problem
    (its kernels read BSHD: the op passes q/k/v transposed). Unserved when the family is not
    registered, or for what it refuses by name (its problem type says why)."""
    fams = families()
    if "attention" not in fams:
        return Unserved("the attention family is not registered in this install (rocke-aot families)")
    if has_mask:
        return Unserved("attn_mask given (a float or boolean mask: the kernels serve causal and no mask)")
    if dropout_p:
        return Unserved(f"dropout_p={dropout_p} (inference kernels)")
    if len(q_shape) != 4 or len(k_shape) != 4 or tuple(k_shape) != tuple(v_shape):
        return Unserved(f"shapes q {tuple(q_shape)} k {tuple(k_shape)} v {tuple(v_shape)} are not (B, H, S, D)")
    b, hq, sq, d = (int(v) for v in q_shape)
    _, hkv, sk, _ = (int(v) for v in k_shape)
    if is_causal and sq != sk:
        return Unserved(f"is_causal with seqlen_q {sq} != seqlen_k {sk}: torch aligns the causal mask top-left, "
                        f"the kernels bottom-right")
    raw = {"batch": b, "seqlen_q": sq, "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv, "head_dim": d,
           "dtype": dtype, "causal": bool(is_causal)}
    if scale is not None:
        raw["scale"] = float(scale)
    try:
        from rocke_aot.service.selection import parse_problem

        return parse_problem("attention", raw)
    except (SpecError, TypeError, ValueError) as e:
        return Unserved(str(e))


def families() -> Mapping[str, Any]:
    from rocke_aot.variants.families import FAMILIES

    return FAMILIES


def problem_json(problem: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    d = asdict(problem) if is_dataclass(problem) and not isinstance(problem, type) else dict(problem)
    return {k: v for k, v in d.items() if v is not None}


def build_command(arch: str, family: str, problem: Any) -> str:
    doc = json.dumps({family: [problem_json(problem)]}, sort_keys=True)
    return (f"rocke-aot build --arch {arch} --family {family} --problems problems.json   "
            f"(problems.json: {doc})")


class LaunchPath:
    """One (family, problem)'s kernel ready to launch (module doc)."""

    __slots__ = ("kernel", "problem", "rt", "module", "fn", "shared", "steps", "pointers", "workspace", "buffers",
                 "order", "bound", "calls", "run", "_lock")

    def __init__(self, rt: Any, kernel: LoadedKernel, problem: Any, loaded: tuple[Any, Any] | None = None):
        """``loaded``: (module, function) of this kernel already loaded (the Dispatcher loads each
        kernel once, however many shapes it serves); None loads it here."""
        contract = kernel.contract
        self.kernel, self.problem, self.rt = kernel, problem, rt
        access = {a.name: a.access for a in contract.args}
        self.pointers = tuple(a.name for a in contract.args if a.kind == "global_pointer")
        offsets = {a.name: a.offset for a in contract.args}
        plan = contract.plan(problem)
        self.workspace = {a.name: a.nbytes for a in plan.args if access[a.name] == "workspace"}
        self.buffers: dict[str, Any] = {}  # the workspace buffers, allocated by the caller (ops.py)
        template = launches(contract, problem, {n: 0 for n in self.pointers})  # runner/run.py packs
        self.steps = []
        for ln in template:
            buf = ctypes.create_string_buffer(ln.args.buffer, max(len(ln.args.buffer), 1))
            base = ctypes.addressof(buf)
            params = (ctypes.c_void_p * max(len(ln.args.offsets), 1))(*[base + o for o in ln.args.offsets])
            slots = tuple((n, offsets[n], struct.unpack_from("<Q", ln.args.buffer, offsets[n])[0])
                          for n in self.pointers)
            empty = any(g <= 0 for g in ln.grid)
            self.steps.append((ln.grid, ln.block, buf, params, ctypes.addressof(params), slots, empty))
        if loaded is None:
            module = rt.load(kernel.image)
            loaded = (module, rt.function(module, contract.kernel))
        self.module, self.fn = loaded
        self.shared = contract.dynamic_shared_bytes
        if self.shared:
            rt.allow_dynamic_shared(self.fn, self.shared)
        self.order: tuple[str, ...] | None = None  # bind(): the operands' order of launch()'s tuple
        self.bound: tuple = ()  # bind(): per step (grid, block, buf, params, ((index, offset, delta), ...))
        self.calls = 0  # launch() calls (Dispatcher.served counts them per op)
        self.run: Callable[[Sequence[int], int], None] = self.launch  # bind() sets it
        self._lock = threading.Lock()

    def bind(self, order: Sequence[str], fixed: Mapping[str, int]) -> None:
        """Ready launch(): ``fixed`` (the workspace pointers, allocated once per path) written into
        every step's buffer now; each other pointer found at its index in ``order``. Every pointer
        the contract takes is one or the other (SpecError otherwise); a second bind is a no-op."""
        with self._lock:
            if self.order is not None:
                return
            order = tuple(order)
            missing = [n for n in self.pointers if n not in fixed and n not in order]
            if missing:
                raise SpecError(f"{self.kernel.contract.kernel}: pointers {missing} neither operands nor workspace")
            bound = []
            for grid, block, buf, _, params, slots, empty in self.steps:
                live = []
                for name, off, delta in slots:
                    if name in fixed:
                        struct.pack_into("<Q", buf, off, fixed[name] + delta)
                    else:
                        live.append((order.index(name), off, delta))
                if not empty:
                    bound.append((grid, block, buf, params, tuple(live)))
            self.bound, self.order = tuple(bound), order
            if len(bound) == 1:  # one launch (no split axis): its own closure, every name bound once
                self.run = self._one(*bound[0])
            else:
                self.run = self.launch

    def _one(self, grid, block, buf, params, live) -> Callable[[Sequence[int], int], None]:
        lock, pack, launch, fn, shared = self._lock, _PACK, self.rt.launch_params, self.fn, self.shared

        def run(ptrs: Sequence[int], stream: int) -> None:
            with lock:
                for i, off, delta in live:
                    pack(buf, off, ptrs[i] + delta)
                launch(fn, grid, block, params, shared, stream)
                self.calls += 1

        return run

    def launch(self, ptrs: Sequence[int], stream: int) -> None:
        """One call on bound pointers (bind()): ``ptrs`` in the bound order (``run``: the same,
        as one closure when the path is one launch)."""
        pack, launch, fn, shared = _PACK, self.rt.launch_params, self.fn, self.shared
        with self._lock:  # the buffers are shared: the driver copies them when the launch returns
            for grid, block, buf, params, live in self.bound:
                for i, off, delta in live:
                    pack(buf, off, ptrs[i] + delta)
                launch(fn, grid, block, params, shared, stream)
            self.calls += 1

    def write(self, pointers: Mapping[str, int]) -> list[bytes]:
        """The argument buffers of every step with ``pointers`` written (what a call launches)."""
        with self._lock:
            for _, _, buf, _, _, slots, _ in self.steps:
                for name, off, delta in slots:
                    struct.pack_into("<Q", buf, off, pointers[name] + delta)
            return [bytes(s[2]) for s in self.steps]

    def __call__(self, pointers: Mapping[str, int], stream: int = 0) -> None:
        pack, launch, fn, shared = struct.pack_into, self.rt.launch_params, self.fn, self.shared
        with self._lock:  # the buffers are shared: the driver copies them when the launch returns
            for grid, block, buf, _, params, slots, empty in self.steps:
                if empty:
                    continue
                for name, off, delta in slots:
                    pack("<Q", buf, off, pointers[name] + delta)
                launch(fn, grid, block, params, shared, stream)



def _candidate(entry: Mapping[str, Any], image: bytes, metadata: Mapping[str, Any]) -> LoadedKernel:
    from rocke_aot.runner.bench import loaded_candidate as runner_candidate

    return runner_candidate(dict(entry), 0, image, dict(metadata))


class Dispatcher:
    """The in-process shape table of one process's ops (module doc)."""

    def __init__(self, source: Any, *, runtime_for: Callable[[Any], Any], arch_for: Callable[[Any], Target],
                 lanes: Sequence[str] | None = None, policy: str = "report"):
        if policy not in POLICIES:
            raise SpecError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
        self.source, self.runtime_for, self.arch_for = source, runtime_for, arch_for
        self.lanes = list(lanes) if lanes else None
        self.policy = policy
        self.table: dict[tuple[Any, str, Any], LaunchPath | Unserved] = {}
        self._served: Counter[str] = Counter()  # hit() counts, and closed paths' launch() counts
        self.fallbacks: Counter[tuple[str, str]] = Counter()
        self.selects = 0  # source.ranked calls: one per new shape
        self.resolve_s = {"select": 0.0, "fetch": 0.0, "load": 0.0}  # a new shape's seconds, by step
        self.modules: dict[tuple[Any, str], tuple[Any, Any, Any]] = {}  # (device, key) -> (runtime, module, fn)
        self.fast: dict[tuple, Any] = {}  # ops.py: a call's (shapes, dtypes, args) -> (problem, path), or a linear entry
        self._lock = threading.Lock()

    def path(self, family: str, problem: Any, device: Any) -> LaunchPath | Unserved:
        key = (device, family, problem)
        hit = self.table.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self.table.get(key)
            if hit is None:
                hit = self.table[key] = self._resolve(family, problem, device)
        return hit

    def _resolve(self, family: str, problem: Any, device: Any) -> LaunchPath | Unserved:
        target = self.arch_for(device)
        self.selects += 1
        t0 = time.perf_counter()
        try:
            ranked = self.source.ranked(target, family, problem, self.lanes, limit=1)  # the top one launches
        except SpecError as e:  # a problem the family refuses by name (its reason)
            return Unserved(f"{family} refuses {problem}: {e}")
        finally:
            t1 = time.perf_counter()
            self.resolve_s["select"] += t1 - t0
        if not ranked:
            return Unserved(NO_CANDIDATE, build=True)
        entry = ranked[0]
        image, metadata = self.source.load(entry["key"])
        kernel, rt = _candidate(entry, image, metadata), self.runtime_for(device)
        t2 = time.perf_counter()
        self.resolve_s["fetch"] += t2 - t1
        got = self.modules.get((device, kernel.key))
        if got is None:
            module = rt.load(kernel.image)
            got = self.modules[(device, kernel.key)] = (rt, module, rt.function(module, kernel.contract.kernel))
        self.resolve_s["load"] += time.perf_counter() - t2
        return LaunchPath(rt, kernel, problem, got[1:])

    @property
    def served(self) -> Counter[str]:
        """Calls served per op: hit()'s counts plus every path's launch() count (its family's op)."""
        out = Counter(self._served)
        for (_, family, _), v in list(self.table.items()):
            if isinstance(v, LaunchPath) and v.calls:
                out[OP_OF.get(family, family)] += v.calls
        return out

    def hit(self, op: str) -> None:
        self._served[op] += 1

    def miss(self, op: str, family: str, problem: Any, unserved: Unserved, device: Any = None) -> None:
        """Strict: NotServedError; report: the fallback counted with its reason."""
        if self.policy == "strict":
            what = f"{op} ({family} {problem})" if problem is not None else op
            msg = f"rocke_aot.torch strict: no prebuilt kernel serves {what}: {unserved.reason}"
            if unserved.build and problem is not None:
                msg += f"; build it: {build_command(self.arch_for(device).id, family, problem)}"
            raise NotServedError(msg)
        self.fallbacks[(op, unserved.reason)] += 1

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "served": dict(self.served),
                "fallbacks": [{"op": op, "reason": why, "calls": n} for (op, why), n in self.fallbacks.most_common()],
                "shapes": sum(1 for v in self.table.values() if isinstance(v, LaunchPath)),
                "unserved_shapes": sum(1 for v in self.table.values() if isinstance(v, Unserved)),
                "selects": self.selects,
                "resolve_ms": {k: round(v * 1e3, 1) for k, v in self.resolve_s.items()}}

    def render(self) -> str:
        s = self.summary()
        lines = [f"rocke_aot.torch ({s['policy']}): served {sum(s['served'].values())} calls "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(s['served'].items())) or 'none'}) on {s['shapes']} shapes; "
                 f"fell back {sum(f['calls'] for f in s['fallbacks'])} calls"]
        lines += [f"  fallback {f['op']}: {f['calls']} calls: {f['reason']}" for f in s["fallbacks"]]
        return "\n".join(lines)

    def close(self) -> None:
        """Unload every module; the table is emptied (a later call selects again)."""
        for rt, module, _ in self.modules.values():
            try:
                rt.unload(module)
            except RockeError:
                pass
        self._served = self.served  # the paths' counts outlive them
        self.modules.clear()
        self.table.clear()
        self.fast.clear()
