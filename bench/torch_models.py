"""Real models on prebuilt kernels through rocke_aot.torch (issue 40): problems, serve, cold start, speed.

    python bench/torch_models.py problems --out P.json [--device cuda|meta]
        the linear / conv / attention problems a Llama-style decoder (transformers LlamaConfig,
        random weights, prefill and decode) and a torchvision ResNet-50 (random weights) call,
        as a `rocke-aot build --problems` file ({family: [problem, ...]})
    python bench/torch_models.py run --cache URL | --server URL --local DIR [--out R.json]
        per model: eager vs rocke-aot outputs (both against a float32 reference: the tolerance
        is the dtype's, scaled by eager's own error), layers served vs fallen back (with reasons),
        kernels compiled on the host during the routed runs (Triton compiles, inductor/dynamo
        counters: must be 0), steady-state forward times (eager vs routed, CUDA events) and per
        layer kind (each served problem: the rocke-aot op vs torch's op), the per-call host
        overhead of the op beside the cached launch path and a bare Runtime.launch
    python bench/torch_models.py first --server URL --local EMPTY_DIR --model llama|resnet50
        time to first inference on a fresh host: a new process, an empty local store, the
        kernels fetched from the loopback service as the shapes appear; configure + first forward
    python bench/torch_models.py compile-cold --model llama|resnet50
        torch.compile's cold start of the same model in a fresh process (empty inductor and
        Triton caches: the caller sets TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR)

bench/torch_device.sh runs all of it on one GPU host (the cache built there) and keeps the raw
output. Every figure is a ratio or a time inside one run on one device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

BATCH_LLAMA, PREFILL, DECODE_STEPS = 2, 128, 4
BATCH_RESNET = 8
DTYPE = torch.float16


# -- the models ------------------------------------------------------------------------------------

def llama(device):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=8192, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device=device, dtype=DTYPE).eval()


def resnet50(device):
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).to(device=device, dtype=DTYPE).eval()


def inputs(name, device):
    g = torch.Generator(device="cpu").manual_seed(1)
    if name == "llama":
        return torch.randint(0, 8192, (BATCH_LLAMA, PREFILL), generator=g).to(device)
    return torch.randn(BATCH_RESNET, 3, 224, 224, generator=g).to(device=device, dtype=DTYPE)


@torch.no_grad()
def forward(name, model, x):
    """llama: prefill then DECODE_STEPS decode steps over the KV cache, fed fixed tokens (not the
    argmax: every run compared decodes the same sequence), the logits of every step concatenated;
    resnet50: one forward."""
    if name != "llama":
        return model(x).float()
    out = model(x, use_cache=True)
    cache, logits = out.past_key_values, [out.logits[:, -1].float()]
    steps = torch.randint(0, 8192, (DECODE_STEPS, x.shape[0], 1), generator=torch.Generator().manual_seed(2))
    for tok in steps.to(x.device):
        out = model(tok, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits[:, -1].float())
    return torch.cat(logits, 1)


MODELS = {"llama": llama, "resnet50": resnet50}


# -- problems -------------------------------------------------------------------------------------

class Record(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.problems = defaultdict(dict)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from rocke_aot.torch import dispatch as D
        from rocke_aot.torch.runtime import dtype_name

        kwargs = kwargs or {}
        p = None
        if func is F.linear:
            p = ("gemm", D.linear_problem(tuple(args[0].shape), tuple(args[1].shape), dtype_name(args[0].dtype)))
        elif func is F.conv2d:
            a = list(args) + [None] * 7
            p = ("conv_direct_fwd", D.conv2d_problem(
                tuple(a[0].shape), tuple(a[1].shape), kwargs.get("stride", a[3] or 1), kwargs.get("padding", a[4] or 0),
                kwargs.get("dilation", a[5] or 1), kwargs.get("groups", a[6] or 1), dtype_name(a[0].dtype)))
        elif func is F.scaled_dot_product_attention:
            q, k = args[0], args[1]
            p = ("attention", {"batch": q.shape[0], "seqlen_q": q.shape[2], "seqlen_k": k.shape[2],
                               "heads_q": q.shape[1], "heads_kv": k.shape[1], "head_dim": q.shape[3],
                               "dtype": dtype_name(q.dtype), "causal": bool(kwargs.get("is_causal", False))})
        if p is not None and not isinstance(p[1], D.Unserved):
            doc = D.problem_json(p[1])
            self.problems[p[0]][json.dumps(doc, sort_keys=True)] = doc
        return func(*args, **kwargs)


def cmd_problems(a):
    rec = Record()
    for name in a.models:
        model = MODELS[name](a.device)
        with rec:
            forward(name, model, inputs(name, a.device))
    doc = {fam: list(ps.values()) for fam, ps in rec.problems.items()}
    if not a.attention:
        doc.pop("attention", None)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({fam: len(ps) for fam, ps in doc.items()}))


# -- compiles on the host -------------------------------------------------------------------------

class CompileCount:
    """Triton compiles (triton.compile wrapped) and dynamo/inductor counters while active."""

    def __init__(self):
        self.triton = 0

    def __enter__(self):
        self._patched = []
        try:
            import triton
            import triton.compiler.compiler as tc

            for mod in (triton, tc):
                orig = mod.compile

                def counted(*args, _orig=orig, **kw):
                    self.triton += 1
                    return _orig(*args, **kw)

                mod.compile = counted
                self._patched.append((mod, orig))
        except ImportError:
            pass
        self._dynamo = self._counters()
        return self

    @staticmethod
    def _counters():
        try:
            from torch._dynamo.utils import counters
        except ImportError:
            return 0
        return sum(sum(c.values()) for k, c in counters.items() if k in ("inductor", "frames"))

    def __exit__(self, *exc):
        for mod, orig in self._patched:
            mod.compile = orig
        self.dynamo = self._counters() - self._dynamo

    def as_dict(self):
        return {"triton_compiles": self.triton, "dynamo_inductor_events": self.dynamo}


# -- timing -----------------------------------------------------------------------------------------

def cuda_ms(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return min(best)


def rel_err(y, ref):
    return float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))


EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23}


def open_dispatcher(a):
    import rocke_aot.torch as rt
    from rocke_aot.torch.source import open_source

    src = open_source(server=a.server, local=a.local, root_key=a.root_key, cache=a.cache)
    return rt.configure(src, policy="report", lanes=["llvm22"], summary_at_exit=False)


def cmd_run(a):
    import rocke_aot.torch as rt
    from rocke_aot.torch import dispatch as D

    dev = "cuda"
    d = open_dispatcher(a)
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "models": {}}
    for name in a.models:
        model, x = MODELS[name](dev), inputs(name, dev)
        ref = forward(name, model.float(), x if name == "llama" else x.float())  # the float32 reference
        model = model.to(DTYPE)
        eager = forward(name, model, x)
        before = d.summary()
        with CompileCount() as cc, rt.prebuilt("report"):
            routed = forward(name, model, x)
        torch.cuda.synchronize()
        after = d.summary()
        served = {k: v - before["served"].get(k, 0) for k, v in after["served"].items()}
        fb_before = {(f["op"], f["reason"]): f["calls"] for f in before["fallbacks"]}
        fallbacks = [{**f, "calls": f["calls"] - fb_before.get((f["op"], f["reason"]), 0)} for f in after["fallbacks"]]
        fallbacks = [f for f in fallbacks if f["calls"]]
        e_eager, e_routed = rel_err(eager, ref), rel_err(routed, ref)
        tol = 2 * e_eager + 4 * EPS[DTYPE]
        t_eager = cuda_ms(lambda: forward(name, model, x), reps=10)
        with rt.prebuilt("report"):
            t_routed = cuda_ms(lambda: forward(name, model, x), reps=10)
        rt.swap(model)  # the module pass: linear/conv modules call the ops, no mode (SDPA stays torch's)
        with CompileCount() as cc2:
            swapped = forward(name, model, x)
        t_swap = cuda_ms(lambda: forward(name, model, x), reps=10)
        m = {"served_calls": served, "fallbacks": fallbacks, "compiles": cc.as_dict(), "compiles_swap": cc2.as_dict(),
             "rel_err_eager_vs_f32": e_eager, "rel_err_rocke_vs_f32": e_routed,
             "rel_err_rocke_vs_eager": rel_err(routed, eager.float()), "rel_err_swap_vs_f32": rel_err(swapped, ref),
             "tolerance": tol, "match": e_routed <= tol and rel_err(swapped, ref) <= tol,
             "forward_ms_eager": t_eager, "forward_ms_rocke_mode": t_routed, "forward_ms_rocke_swap": t_swap,
             "mode_over_eager": t_routed / t_eager, "swap_over_eager": t_swap / t_eager}
        report["models"][name] = m
        print(name, json.dumps(m), flush=True)
    # per layer kind: each served shape, the op against torch's own
    kinds = defaultdict(lambda: [0.0, 0.0, 0])
    per_shape = []
    for (_device, family, problem), path in list(d.table.items()):
        if not isinstance(path, D.LaunchPath):
            continue
        op, ref_fn = _layer_calls(family, problem)
        if op is None:
            continue
        t_op, t_torch = cuda_ms(op), cuda_ms(ref_fn)
        kinds[family][0] += t_op
        kinds[family][1] += t_torch
        kinds[family][2] += 1
        per_shape.append({"family": family, "problem": D.problem_json(problem), "kernel": path.kernel.kernel,
                          "rocke_ms": t_op, "torch_ms": t_torch})
    report["per_shape"] = per_shape
    report["per_kind"] = {f: {"shapes": n, "rocke_ms_sum": a_, "torch_ms_sum": b_, "torch_over_rocke": b_ / a_}
                          for f, (a_, b_, n) in kinds.items()}
    print("per kind", json.dumps(report["per_kind"]), flush=True)
    report["overhead"] = overhead(d)
    print("overhead", json.dumps(report["overhead"]), flush=True)
    report["summary"] = d.summary()
    print(d.render())
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    ok = all(m["match"] and not m["compiles"]["triton_compiles"] and not m["compiles_swap"]["triton_compiles"]
             for m in report["models"].values())
    print("RESULT", "ok" if ok else "FAILED (outputs outside tolerance or a kernel compiled on the host)")
    return 0 if ok else 1


def _layer_calls(family, p):
    dev, dt = "cuda", DTYPE
    if family == "gemm":
        x, w = torch.randn(p.m, p.k, device=dev, dtype=dt), torch.randn(p.n, p.k, device=dev, dtype=dt)
        return (lambda: torch.ops.rocke_aot.linear(x, w, None)), (lambda: F.linear(x, w))
    if family == "conv_direct_fwd":
        x = torch.randn(p.n, p.c, p.h, p.w, device=dev, dtype=dt).to(memory_format=torch.channels_last)
        w = torch.randn(p.k, p.c, p.r, p.s, device=dev, dtype=dt).to(memory_format=torch.channels_last)
        st, pd, dl = [p.stride_h, p.stride_w], [p.pad_h, p.pad_w], [p.dil_h, p.dil_w]
        return (lambda: torch.ops.rocke_aot.conv2d(x, w, None, st, pd, dl)), (lambda: F.conv2d(x, w, None, st, pd, dl))
    if family == "attention":
        q = torch.randn(p.batch, p.heads_q, p.seqlen_q, p.head_dim, device=dev, dtype=dt)
        k = torch.randn(p.batch, p.heads_kv, p.seqlen_k, p.head_dim, device=dev, dtype=dt)
        gqa = p.heads_kv != p.heads_q
        return ((lambda: torch.ops.rocke_aot.sdpa(q, k, k, p.causal, None)),
                (lambda: F.scaled_dot_product_attention(q, k, k, is_causal=p.causal, enable_gqa=gqa)))
    return None, None


def overhead(d):
    """Host microseconds per call on a tiny served shape: the op (shape lookup, operands, launch on
    torch's stream), the cached launch path alone, a bare Runtime.launch (packs its own buffer),
    and torch's F.linear on the same shape."""
    from rocke_aot.torch import dispatch as D

    paths = [(k, v) for k, v in d.table.items() if isinstance(v, D.LaunchPath) and k[1] == "gemm"]
    if not paths:
        return {"error": "no served gemm shape"}
    (_, _, p), path = min(paths, key=lambda kv: kv[0][2].m * kv[0][2].n * kv[0][2].k)
    x = torch.randn(p.m, p.k, device="cuda", dtype=DTYPE)
    w = torch.randn(p.n, p.k, device="cuda", dtype=DTYPE)
    wt, c = w.t().contiguous(), torch.empty(p.m, p.n, device="cuda", dtype=DTYPE)
    ptrs = {"A": x.data_ptr(), "B": wt.data_ptr(), "C": c.data_ptr()}
    for name, nbytes in path.workspace.items():
        ptrs[name] = path.buffers.setdefault(name, torch.zeros(nbytes, dtype=torch.uint8, device="cuda")).data_ptr()
    stream = torch.cuda.current_stream().cuda_stream
    from rocke_aot.runner.run import launches

    bare = launches(path.kernel.contract, p, ptrs)
    rt_ = path.rt

    def bare_launch():
        for ln in bare:
            rt_.launch(path.fn, ln.grid, ln.block, ln.args, path.shared, stream)

    from rocke_aot.torch import ops

    out = {"problem": D.problem_json(p),
           "op_us": host_us(lambda: torch.ops.rocke_aot.linear(x, w, None)),
           "eager_impl_us": host_us(lambda: ops.linear_impl(x, w, None)),  # what the mode / swap call in eager
           "launch_path_us": host_us(lambda: path(ptrs, stream)),
           "bare_launch_us": host_us(bare_launch),
           "torch_linear_us": host_us(lambda: F.linear(x, w))}
    out["op_over_bare_us"] = out["op_us"] - out["bare_launch_us"]
    out["eager_impl_over_bare_us"] = out["eager_impl_us"] - out["bare_launch_us"]
    try:  # a Triton JIT-launched kernel of the same size (compiled once here, after the models' counts)
        import triton
        import triton.language as tl

        @triton.jit
        def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

        n = c.numel()
        grid = (triton.cdiv(n, 1024),)
        _scale[grid](c, c, n, BLOCK=1024)
        out["triton_jit_launch_us"] = host_us(lambda: _scale[grid](c, c, n, BLOCK=1024))
    except Exception as e:  # reported, not fatal: the other figures stand
        out["triton_jit_launch_us"] = f"{type(e).__name__}: {e}"
    return out


def cmd_first(a):
    """A fresh process: configure (empty local store) and the first forward, timed."""
    t0 = time.perf_counter()
    import rocke_aot.torch as rt

    model, x = MODELS[a.model]("cuda"), inputs(a.model, "cuda")
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    d = open_dispatcher(a)
    with CompileCount() as cc, rt.prebuilt("report"):
        forward(a.model, model, x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    doc = {"model": a.model, "first_inference_s": t2 - t1, "setup_s": t1 - t0, "compiles": cc.as_dict(),
           "summary": d.summary()}
    print(json.dumps(doc), flush=True)


def cmd_compile_cold(a):
    model, x = MODELS[a.model]("cuda"), inputs(a.model, "cuda")
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    compiled = torch.compile(model)
    with CompileCount() as cc:
        forward(a.model, compiled, x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(json.dumps({"model": a.model, "compile_first_inference_s": t2 - t1, "compiles": cc.as_dict()}), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("problems")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "meta")
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--attention", action="store_true", help="also list the attention problems")
    for name in ("run", "first"):
        q = sub.add_parser(name)
        q.add_argument("--cache")
        q.add_argument("--server")
        q.add_argument("--local")
        q.add_argument("--root-key", help="the pinned root key: every kernel under the signed manifest")
        q.add_argument("--out")
        q.add_argument("--models", nargs="+", default=list(MODELS))
        q.add_argument("--model", default="llama")
    c = sub.add_parser("compile-cold")
    c.add_argument("--model", default="llama")
    a = ap.parse_args(argv)
    return {"problems": cmd_problems, "run": cmd_run, "first": cmd_first, "compile-cold": cmd_compile_cold}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main() or 0)
