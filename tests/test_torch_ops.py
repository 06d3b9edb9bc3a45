"""rocke_aot.torch on CPU: dispatch and the shape table over a real store and select, both
policies, the strict error text, the argument packing against runner/run.py's pack (the
reference), fakes through torch.export (meta) and torch.compile, and the mode over a model.

The kernels are real launch contracts of the variant tables' specs, stored beside fake code
objects in a real store (tests/_selstore.py's way); the runtime is a recorder that reads each
launch's kernelParams back as a driver does (8 bytes per pointer, the scalar's size otherwise).
The launch on a GPU is tests/test_torch_gpu.py and bench/torch_device.sh.
"""

from __future__ import annotations

import ctypes
import hashlib

import pytest

torch = pytest.importorskip("torch")  # the [torch] extra is part of [test]: CI installs it

import torch.nn.functional as F  # noqa: E402
from _selstore import code_object_section, fake_inputs  # noqa: E402

import rocke_aot.torch as rtorch  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402
from rocke_aot.errors import NotServedError  # noqa: E402
from rocke_aot.launch import LaunchContract  # noqa: E402
from rocke_aot.runner.bench import StoreSource  # noqa: E402
from rocke_aot.runner.run import launches, pack  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402
from rocke_aot.torch import dispatch as D  # noqa: E402
from rocke_aot.torch import ops  # noqa: E402
from rocke_aot.variants import table  # noqa: E402
from rocke_aot.variants.families import FAMILIES  # noqa: E402

ARCH, LANE = "gfx942", "llvm22"


class Recorder:
    """A runtime that records launches (module doc)."""

    name = "recorder"

    def __init__(self):
        self.launches: list[dict] = []
        self.contracts: dict[str, LaunchContract] = {}
        self.loaded = 0

    def load(self, image):
        self.loaded += 1
        return bytes(image)

    def function(self, module, name):
        return name

    def unload(self, module):
        pass

    def allow_dynamic_shared(self, fn, nbytes):
        pass

    def launch_params(self, fn, grid, block, params, shared=0, stream=0):
        contract = self.contracts[fn]
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        buf = bytearray(contract.kernarg_size)
        for i, a in enumerate(contract.args):
            buf[a.offset:a.offset + a.size] = ctypes.string_at(slots[i], a.size)
        self.launches.append({"fn": fn, "grid": grid, "block": block, "args": bytes(buf), "stream": stream})


def _spec(family, pick):
    return next(s for s in table.enumerate_specs(family, ARCH, LANE) if pick(s))


def _contract(spec, **kw):
    threads = spec.geometry(Target.parse(ARCH)).threads
    return LaunchContract.build(spec.kernel_name, spec.launch_formulas(), (threads, 1, 1), **kw)


def _put(store, family, spec, contract):
    inputs = fake_inputs(ARCH, LANE, family, spec.to_dict())
    blob = b"\x7fELF-fake-" + hashlib.sha256(spec.kernel_name.encode()).digest()
    store.put(inputs, blob, ir_sha256=hashlib.sha256(blob).hexdigest(),
              metadata={"code_object": code_object_section(workgroup=1024), "format": "hsaco",
                        "launch": contract.as_dict()}, provenance={"test": True})


GEMM = _spec("gemm", lambda s: s.in_dtype == "f16" and s.out_dtype == "f16")
CONV = _spec("conv_direct_fwd", lambda s: s.dtype == "f16" and s.dil_h == 1 and s.dil_w == 1)


@pytest.fixture
def served(tmp_path):
    """A store serving one gemm and one conv spec; the process's Dispatcher over it."""
    store = Store.open(str(tmp_path / "c.sqlite"))
    rec = Recorder()
    for family, spec in (("gemm", GEMM), ("conv_direct_fwd", CONV)):
        c = _contract(spec)
        _put(store, family, spec, c)
        rec.contracts[c.kernel] = c
    d = rtorch.configure(StoreSource(store), runtime=rec, arch=ARCH, lanes=[LANE], summary_at_exit=False)
    yield d, rec
    d.close()
    store.close()


def test_a_new_shape_asks_only_for_the_top_candidate(tmp_path):
    """The dispatcher launches the top-ranked candidate and asks its source for that one only (a
    service answers one row, not the whole ranking): the kernel it launches is the first of the
    store's full ranking of the same problem."""
    store = Store.open(str(tmp_path / "c.sqlite"))
    rec = Recorder()
    gemms = [s for s in table.enumerate_specs("gemm", ARCH, LANE) if s.in_dtype == "f16" and s.out_dtype == "f16"][:6]
    for spec in gemms:
        c = _contract(spec)
        _put(store, "gemm", spec, c)
        rec.contracts[c.kernel] = c

    class Spy(StoreSource):
        asked: list = []

        def ranked(self, *a, **kw):
            got = super().ranked(*a, **kw)
            self.asked.append((kw.get("limit"), len(got)))
            return got

    d = rtorch.configure(Spy(store), runtime=rec, arch=ARCH, lanes=[LANE], summary_at_exit=False)
    try:
        torch.ops.rocke_aot.linear(_x(2, 3, 64), _x(48, 64), None)
        problem = D.linear_problem((2, 3, 64), (48, 64), "f16")
        full = StoreSource(store).ranked(Target.parse(ARCH), "gemm", problem, [LANE])
        assert Spy.asked == [(1, 1)] and len(full) > 1
        assert rec.launches[0]["fn"] == next(s.kernel_name for s in gemms if s.to_dict() == full[0]["spec"])
    finally:
        d.close()
        store.close()


def _x(*shape):
    return torch.randn(*shape).to(torch.float16)


def test_linear_selects_once_per_shape_and_packs_as_the_runner(served):
    d, rec = served
    x, w = _x(2, 3, 64), _x(48, 64)
    y1 = torch.ops.rocke_aot.linear(x, w, None)
    y2 = torch.ops.rocke_aot.linear(x, w, None)
    assert y1.shape == (2, 3, 48) and y1.dtype == torch.float16
    assert d.selects == 1 and rec.loaded == 1 and d.served["linear"] == 2 and not d.fallbacks
    problem = D.linear_problem((2, 3, 64), (48, 64), "f16")
    assert (problem.m, problem.n, problem.k) == (6, 48, 64)
    contract = rec.contracts[GEMM.kernel_name]
    plan = contract.plan(problem)
    wt = ops._prepared(w, "t")  # the gemm's B: K x N row-major = the (out, in) weight transposed
    assert torch.equal(wt, w.t()) and wt.is_contiguous()
    for call, y in zip(rec.launches, (y1, y2)):
        want = pack(plan, {"A": x.data_ptr(), "B": wt.data_ptr(), "C": y.data_ptr()})
        assert call["args"] == want.buffer
        assert call["grid"] == plan.grid and call["block"] == plan.block and call["stream"] == 0
    w.add_(1)  # an in-place update of the weight: its transposed copy is made again
    assert torch.equal(ops._prepared(w, "t"), w.t())


def test_conv2d_operands_are_channels_last_and_packed_as_the_runner(served):
    d, rec = served
    s = CONV
    x = _x(2, s.c, 12, 10)
    w = _x(s.k, s.c, s.r, s.s)
    y = torch.ops.rocke_aot.conv2d(x, w, None, [s.stride_h, s.stride_w], [s.pad_h, s.pad_w], [s.dil_h, s.dil_w])
    problem = D.conv2d_problem(x.shape, w.shape, (s.stride_h, s.stride_w), (s.pad_h, s.pad_w), (1, 1), 1, "f16")
    assert y.shape == (2, s.k, *problem.out_hw) and y.is_contiguous(memory_format=torch.channels_last)
    assert d.served["conv2d"] == 1
    xc = x.contiguous(memory_format=torch.channels_last)  # NHWC: a fresh copy, so compare the launch's pointers
    contract = rec.contracts[s.kernel_name]
    plan = contract.plan(problem)
    got = rec.launches[-1]["args"]
    wt = ops._prepared(w, "cl")
    assert torch.equal(wt.permute(0, 2, 3, 1).contiguous().flatten(), w.permute(0, 2, 3, 1).flatten())  # KRSC
    x_ptr = int.from_bytes(got[contract.args[0].offset:contract.args[0].offset + 8], "little")
    assert got == pack(plan, {"X": x_ptr, "Wt": wt.data_ptr(), "Y": y.data_ptr()}).buffer
    assert xc.shape == x.shape


def test_a_chunked_launch_writes_what_the_runner_launches():
    """Over max_tensor_bytes: one step per chunk, each buffer = runner/run.py launches'."""
    rec = Recorder()
    contract = _contract(GEMM, max_tensor_bytes=64 * 64 * 2)
    rec.contracts[contract.kernel] = contract
    from rocke_aot.runner.run import LoadedKernel
    from rocke_aot.variants.problems import GemmProblem

    problem = GemmProblem(m=300, n=64, k=64, dtype="f16", out_dtype="f16")
    path = D.LaunchPath(rec, LoadedKernel("k", contract.kernel, b"img", contract), problem)
    ptrs = {"A": 0x10000, "B": 0x200000, "C": 0x3000000}
    want = [ln.args.buffer for ln in launches(contract, problem, ptrs)]
    assert len(want) > 1 and path.write(ptrs) == want
    path(ptrs, stream=7)
    assert [c["args"] for c in rec.launches] == want and {c["stream"] for c in rec.launches} == {7}


def test_report_falls_back_to_torch_and_counts_each_reason(served):
    d, rec = served
    x, w, b = torch.randn(4, 40), torch.randn(24, 40), torch.randn(24)
    with rtorch.prebuilt("report"):
        y = F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16())  # bf16: no candidate in the store
        xc, wc = torch.randn(1, 4, 8, 8), torch.randn(4, 2, 3, 3)
        y2 = F.conv2d(xc, wc, groups=2)
    torch.testing.assert_close(y, F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()))
    torch.testing.assert_close(y2, F.conv2d(xc, wc, groups=2))
    reasons = {(f["op"], f["reason"]) for f in d.summary()["fallbacks"]}
    assert ("linear", D.NO_CANDIDATE) in reasons
    assert any(op == "conv2d" and "groups=2" in why for op, why in reasons)
    assert not rec.launches and "fell back 2 calls" in d.render()


def test_strict_names_the_problem_and_the_build_command(served):
    d, _ = served
    with rtorch.prebuilt("strict"), pytest.raises(NotServedError) as e:
        F.linear(_x(4, 40).bfloat16(), _x(24, 40).bfloat16())
    msg = str(e.value)
    assert "GemmProblem(m=4, n=24, k=40, dtype='bf16'" in msg and D.NO_CANDIDATE in msg
    assert f"rocke-aot build --arch {ARCH} --family gemm --problems problems.json" in msg
    assert '{"gemm": [{"batch": 1, "dtype": "bf16", "k": 40, "m": 4, "n": 24, "out_dtype": "bf16"}]}' in msg
    assert d.policy == "report"  # the block's policy ends with the block
    with rtorch.prebuilt("strict"), pytest.raises(NotServedError, match="groups=2"):
        F.conv2d(_x(1, 4, 8, 8), _x(4, 2, 3, 3), groups=2)


def test_sdpa_without_the_attention_family_is_a_counted_fallback(served):
    d, _ = served
    q = torch.randn(1, 2, 8, 64, dtype=torch.float16)  # a dtype the family serves: the fallback is the store's
    with rtorch.prebuilt("report"):
        y = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, q, q, is_causal=True))
    (f,) = d.summary()["fallbacks"]
    if "attention" in FAMILIES:
        assert f["reason"] == D.NO_CANDIDATE  # an empty store for it
    else:
        assert f == {"op": "sdpa", "reason": "the attention family is not registered in this install "
                                             "(rocke-aot families)", "calls": 1}
    with rtorch.prebuilt("strict"), pytest.raises(NotServedError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(8, 8, dtype=torch.float16))


def test_route_sends_a_models_linears_to_the_op(served):
    d, rec = served
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 40)).half()
    rtorch.route(model, policy="report")
    model(_x(5, 64))
    assert d.served["linear"] == 2 and not d.fallbacks and len(rec.launches) == 2 and d.selects == 2
    assert rec.loaded == 1  # two shapes, one kernel: its module loaded once
    spent = d.summary()["resolve_ms"]  # where a new shape's time went: selects ran, a kernel was read
    assert set(spent) == {"select", "fetch", "load"} and spent["select"] > 0 and spent["fetch"] > 0
    model.bfloat16()(_x(5, 64).bfloat16())  # no bf16 kernel in the store: two counted fallbacks
    assert d.summary()["fallbacks"] == [{"op": "linear", "reason": D.NO_CANDIDATE, "calls": 2}]
    assert len(rec.launches) == 2


def test_fakes_match_the_real_ops_and_trace_through_export_and_compile(served):
    s = CONV
    x, w, b = _x(3, 64), _x(48, 64), _x(48)
    for op, args in ((torch.ops.rocke_aot.linear.default, (x, w, b)),
                     (torch.ops.rocke_aot.conv2d.default, (_x(1, s.c, 9, 9), _x(s.k, s.c, s.r, s.s), None,
                                                          [s.stride_h, s.stride_w], [s.pad_h, s.pad_w], [1, 1])),
                     (torch.ops.rocke_aot.conv_dgrad_patch.default, (_x(1, 8, 2, 2), _x(8, 4, 4, 4), [1, 4, 8, 8])),
                     (torch.ops.rocke_aot.sdpa.default, (_x(1, 2, 5, 64), _x(1, 2, 5, 64), _x(1, 2, 5, 64), True,
                                                         None))):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(48, 64, dtype=torch.float16))

        def forward(self, x):
            return torch.ops.rocke_aot.linear(x, self.w, None).relu()

    ep = torch.export.export(M().to("meta"), (torch.empty(7, 64, dtype=torch.float16, device="meta"),))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.rocke_aot.linear.default in targets
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    y = torch.compile(M(), backend=backend, fullgraph=True)(_x(7, 64))
    assert y.shape == (7, 48) and len(graphs) == 1
    assert any("rocke_aot.linear" in str(n.target) for n in graphs[0].graph.nodes)


def test_swap_routes_linear_and_conv_modules_without_a_mode(served):
    d, rec = served
    s = CONV
    conv = torch.nn.Conv2d(s.c, s.k, (s.r, s.s), stride=(s.stride_h, s.stride_w), padding=(s.pad_h, s.pad_w),
                           bias=False).half()
    grouped = torch.nn.Conv2d(4, 4, 3, groups=2)
    lin = torch.nn.Linear(64, 48).half()
    rtorch.swap(torch.nn.ModuleList([conv, grouped, lin]))
    y = lin(_x(3, 64))
    conv(_x(1, s.c, 9, 9))
    xg = torch.randn(1, 4, 6, 6)
    torch.testing.assert_close(grouped(xg), F.conv2d(xg, grouped.weight, grouped.bias, padding=0, groups=2))
    assert y.shape == (3, 48) and d.served == {"linear": 1, "conv2d": 1} and len(rec.launches) == 2
    (f,) = d.summary()["fallbacks"]
    assert f["op"] == "conv2d" and "groups=2" in f["reason"]


def test_the_eager_path_only_for_plain_inference_tensors(served):
    d, rec = served
    w = torch.nn.Parameter(_x(48, 64))
    x = _x(3, 64)
    assert ops.eager(x, w.detach()) and not ops.eager(x.to("meta"), w.detach())
    assert not ops.eager(x, w)  # autograd wants a backward: the op, which has none, not a wrong gradient
    with rtorch.prebuilt():
        y = F.linear(x, w)
    assert d.served["linear"] == 1
    with pytest.raises(RuntimeError) as e:
        y.float().sum().backward()
    assert "autograd" in str(e.value).lower()


def test_the_shape_table_keys_dtype_and_shape_apart(served):
    """A call of another dtype or shape never reuses a served entry: f32 of a served f16 shape
    selects again and falls back (the store serves f16 only) with torch's own result; a mixed
    dtype pair is refused by name; the f16 shape stays served."""
    d, rec = served
    x, w = _x(3, 64), _x(48, 64)
    ops.linear_impl(x, w, None)
    y32 = ops.linear_impl(x.float(), w.float(), None)
    assert torch.equal(y32, torch.nn.functional.linear(x.float(), w.float()))
    with pytest.raises(RuntimeError):  # counted as a fallback, then torch's own linear refuses the pair
        ops.linear_impl(x, w.float(), None)
    ops.linear_impl(x, w, None)
    ops.linear_impl(_x(4, 64), w, None)
    assert d.served["linear"] == 3 and len(rec.launches) == 3 and d.selects == 3
    reasons = sorted(why for (op, why) in d.fallbacks)
    assert len(reasons) == 2 and reasons[1].startswith("weight dtype torch.float32 != input dtype torch.float16")


def test_the_op_in_torchs_dispatcher_serves_and_refuses_a_backward(served):
    """torch.ops.rocke_aot.linear (defined with torch.library.Library, not custom_op): served
    with positional or keyword arguments and under no_grad; with a weight that wants a gradient
    the result carries a backward that raises (never a silent None or zero gradient)."""
    d, rec = served
    x, w = _x(3, 64), torch.nn.Parameter(_x(48, 64))
    with torch.no_grad():
        y0 = torch.ops.rocke_aot.linear(x, w, None)
    y1 = torch.ops.rocke_aot.linear(x, w.detach(), bias=None)
    assert y0.grad_fn is None and y1.grad_fn is None and not y1.requires_grad
    y2 = torch.ops.rocke_aot.linear(x, w, None)
    assert y2.requires_grad and y2.grad_fn is not None
    assert d.served["linear"] == 3 and len(rec.launches) == 3 and not d.fallbacks
    with pytest.raises(RuntimeError, match="rocke_aot::linear has no autograd formula"):
        y2.float().sum().backward()
    assert w.grad is None
