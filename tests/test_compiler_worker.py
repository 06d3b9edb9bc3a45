"""Isolated compile workers: an LLVM abort, a hang, a bad request each cost one request.

Real LLVM (the project's llvmlite 0.50 / LLVM 22) in real worker processes; the hang
and crash cases use a real worker plugin that sleeps or aborts.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from _kernels import ADD1

from rocke_aot.aot.compiler import WorkerPool, WorkerSpec, compile_llvmlite, submit_llvmlite
from rocke_aot.errors import CompileError, CompileTimeout

PY = sys.executable

# gfx950's 32x32x16 f16 MFMA: LLVM aborts ("Cannot select") when asked for it on gfx942.
MFMA_32X32X16 = """\
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @mm(ptr addrspace(1) %out, <8 x half> %a, <8 x half> %b) {
  %r = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x16.f16(<8 x half> %a, <8 x half> %b, <16 x float> zeroinitializer, i32 0, i32 0, i32 0)
  store <16 x float> %r, ptr addrspace(1) %out
  ret void
}
declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x16.f16(<8 x half>, <8 x half>, <16 x float>, i32, i32, i32)
"""

PLUGIN = textwrap.dedent("""\
    import os, time

    def _sleep(payload, blob, ctx):
        time.sleep(payload["seconds"])
        return {"slept": payload["seconds"]}, None

    def _abort(payload, blob, ctx):
        os.write(2, b"plugin: about to abort\\n")
        os.abort()

    def _echo(payload, blob, ctx):
        print("stray stdout must not corrupt the protocol")
        return {"n": len(blob or b"")}, (blob or b"")[::-1]

    def _noisy(payload, blob, ctx):
        os.write(2, payload["text"].encode() * payload["times"])
        return {"said": len(ctx.stderr())}, None

    HANDLERS = {"test.sleep": _sleep, "test.abort": _abort, "test.echo": _echo, "test.noisy": _noisy}
""")


@pytest.fixture
def pool():
    with WorkerPool(2) as p:
        yield p


@pytest.fixture
def plugin_spec(tmp_path):
    path = tmp_path / "plugin.py"
    path.write_text(PLUGIN)
    return WorkerSpec.of(PY, plugins=[path])


def test_llvm_abort_is_a_compile_error_and_the_pool_goes_on(pool):
    assert compile_llvmlite(PY, MFMA_32X32X16, "gfx950", pool=pool).format == "hsaco"
    with pytest.raises(CompileError) as err:
        compile_llvmlite(PY, MFMA_32X32X16, "gfx942", pool=pool)
    assert "Cannot select" in str(err.value) and "mfma.f32.32x32x16.f16" in str(err.value)
    assert "LLVM ERROR" in err.value.log
    assert "SIGABRT" in str(err.value)
    # the caller is alive, and the next compile on the same pool thread gets a fresh worker
    again = compile_llvmlite(PY, MFMA_32X32X16, "gfx950", pool=pool)
    assert again.code_object.startswith(b"\x7fELF")
    assert pool.stats() == {"workers": 1, "started": 2, "alive": 1}


def test_worker_is_reused_across_compiles(pool):
    spec = WorkerSpec.of(PY)
    first = pool.call(spec, "ping").result["pid"]
    for target in ("gfx942", "gfx950", "gfx1250", "gfx90a"):
        compile_llvmlite(PY, ADD1, target, pool=pool)
    assert pool.call(spec, "ping").result["pid"] == first
    assert pool.stats()["started"] == 1


def test_hang_hits_the_timeout_and_kills_only_that_worker(pool, plugin_spec):
    pid = pool.call(plugin_spec, "ping").result["pid"]
    with pytest.raises(CompileTimeout) as err:
        pool.call(plugin_spec, "test.sleep", {"seconds": 60}, timeout=1.0)
    assert "exceeded 1s" in str(err.value) and "worker killed" in str(err.value)
    assert pool.call(plugin_spec, "test.sleep", {"seconds": 0}, timeout=30).result == {"slept": 0}
    assert pool.call(plugin_spec, "ping").result["pid"] != pid


def test_crash_carries_the_workers_stderr(pool, plugin_spec):
    with pytest.raises(CompileError) as err:
        pool.call(plugin_spec, "test.abort")
    assert "about to abort" in err.value.log
    assert pool.call(plugin_spec, "test.echo", blob=b"abc").blob == b"cba"


def test_stray_stdout_in_a_worker_does_not_corrupt_frames(pool, plugin_spec):
    reply = pool.call(plugin_spec, "test.echo", blob=b"\x00\x01" * 50000)
    assert reply.result == {"n": 100000} and reply.blob == b"\x01\x00" * 50000
    assert "stray stdout" in reply.log  # fd 1 of a worker goes to its stderr file


def test_unknown_processor_warning_is_an_error(pool):
    # LLVM only warns "not a recognized processor" and then compiles for a generic one.
    with pytest.raises(CompileError, match="not a recognized processor"):
        pool.call(WorkerSpec.of(PY), "llvm.compile",
                  {"ir": ADD1, "triple": "amdgcn-amd-amdhsa", "cpu": "gfx9999"})


def test_bad_ir_and_datalayout_are_errors_without_killing_the_worker(pool):
    spec = WorkerSpec.of(PY)
    pid = pool.call(spec, "ping").result["pid"]
    with pytest.raises(CompileError, match="invalid LLVM IR"):
        compile_llvmlite(PY, "define void @f( {", "gfx942", pool=pool)
    wrong_dl = 'target datalayout = "e-p:32:32"\n' + ADD1
    with pytest.raises(CompileError, match="datalayout"):
        compile_llvmlite(PY, wrong_dl, "gfx942", pool=pool)
    with pytest.raises(CompileError, match="unknown request kind"):
        pool.call(spec, "no.such.kind")
    assert pool.call(spec, "ping").result["pid"] == pid


def test_parallel_submits_give_identical_bytes(pool):
    futures = [submit_llvmlite(pool, PY, ADD1, "gfx942:sramecc+:xnack-") for _ in range(4)]
    blobs = {f.result().code_object for f in futures}
    assert len(blobs) == 1
    assert 1 <= pool.stats()["workers"] <= 2


def test_a_missing_interpreter_is_a_compile_error(pool, tmp_path):
    with pytest.raises(CompileError, match="cannot start"):
        compile_llvmlite(str(tmp_path / "nope" / "python"), ADD1, "gfx942", pool=pool)


def test_closed_pool_refuses_work():
    p = WorkerPool(1)
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.call(WorkerSpec.of(PY), "ping")


def test_a_real_llvm_compile_over_its_budget_is_killed(pool):
    from rocke_aot.aot.lower import lower

    big = lower("gemm", {"path": "fma", "block_m": 128, "block_n": 128}, "sm_90", "llvm22").ir
    spec = WorkerSpec.of(PY)
    pool.call(spec, "ping")  # started: the budget below is for codegen alone
    with pytest.raises(CompileTimeout):
        compile_llvmlite(PY, big, "sm_90", pool=pool, timeout=0.05)
    assert compile_llvmlite(PY, ADD1, "gfx942", pool=pool).format == "hsaco"
    assert pool.stats()["started"] == 2


def test_stderr_is_per_request_and_the_file_stays_bounded(plugin_spec):
    from rocke_aot.aot.compiler import Worker

    worker = Worker(plugin_spec, stderr_keep=1000)
    try:
        for i in range(4):
            reply = worker.call("test.noisy", {"text": f"line {i}\n", "times": 300})
            assert reply.log == f"line {i}\n" * 300 and reply.result["said"] == len(reply.log)
            assert worker._stderr_size() == len(reply.log)  # truncated before each request
        assert worker.started == 1
    finally:
        worker.close()
