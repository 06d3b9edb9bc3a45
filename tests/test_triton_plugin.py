"""A user's own @triton.jit kernel, declared from their own package through the plugin entry point and
prebuilt by the public commands for every AMD arch and sm_90 on this CPU-only machine
(examples/triton-plugin-mul, docs/triton-plugins.md).

The example is installed for real (pip --target, from a copy) and found only through its entry point;
every command runs as a user runs it (the `rocke-aot` script in a subprocess). References the code under
test did not produce: llvm-objdump-22 on the code objects, Triton's own version in the toolchain identity.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from _plugins import ROOT, install_example, plugin_env, run_cli

EXAMPLE = ROOT / "examples" / "triton-plugin-mul"
OBJDUMP = shutil.which("llvm-objdump-22") or "/usr/lib/llvm-22/bin/llvm-objdump"
ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1250", "sm_90")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    site = install_example(tmp_path_factory.mktemp("tp") / "site", EXAMPLE)
    return plugin_env(site)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_a_users_triton_kernel_is_a_family_in_every_command(env, tmp_path):
    fams = {f["family"]: f for f in json.loads(_ok(run_cli(env, "families", "--json")).stdout)}
    src = fams["triton_mul"]["source"]
    assert (src["kind"], src["distribution"], src["value"]) == ("plugin", "rocke-aot-triton-mul",
                                                                "rocke_triton_mul.family:FAMILY")
    var = json.loads(_ok(run_cli(env, "variants", "--family", "triton_mul", *[a for x in ARCHES for a in ("--arch", x)],
                                 "--json")).stdout)
    served = {(r["arch"], r["lane"]): r["count"] for r in var["rows"] if r["served"]}
    assert served[("gfx942", "llvm24")] == served[("sm_90", "llvm22")] == 4  # 2 configs x n % 16 == 0 or not

    # `build` for every AMD arch (Triton 3.9, llvm24) and sm_90 (Triton 3.6, llvm22): one config, one class.
    # (sm_90 on llvm24 is left out: Triton 3.9's cubin carries a .nv.info attribute 0x66 the code-object
    # check refuses, as for the in-repo Triton families; docs/triton.md)
    cache = f"sqlite:///{tmp_path}/c.sqlite"
    common = ["--family", "triton_mul", "--where", "BLOCK=1024", "--where", "n_class=div16", "--cache", cache,
              "-j", "2", "--json"]
    amd = ["build", *[a for x in ARCHES[:-1] for a in ("--arch", x)], "--lane", "llvm24", *common]
    nv = ["build", "--arch", "sm_90", "--lane", "llvm22", *common]
    for args in (amd, nv):
        first = json.loads(_ok(run_cli(env, *args, timeout=900)).stdout)
        assert not first["failed"] and first["built"] >= 1, first
        again = json.loads(_ok(run_cli(env, *args, timeout=900)).stdout)
        assert again["built"] == 0 and again["cached"] == first["built"]
    rows = json.loads(_ok(run_cli(env, "cache", "ls", "--cache", cache, "--json")).stdout)
    built = {(r["arch"], r["lane"]) for r in rows if r["family"] == "triton_mul"}
    assert {("gfx90a", "llvm24"), ("gfx942", "llvm24"), ("gfx950", "llvm24"), ("gfx1250", "llvm24"),
            ("sm_90", "llvm22")} <= built

    # `select` answers a problem from those builds
    sel = json.loads(_ok(run_cli(env, "select", "--arch", "gfx950", "--family", "triton_mul", "--problem",
                                 '{"n": 1048576}', "--cache", cache, "--json")).stdout)
    assert sel["accepted"] and all(c["family"] == "triton_mul" for c in sel["accepted"])

    # `compile` (one spec, written to a file): Triton 3.9 for gfx1250, its code object read back
    out = tmp_path / "mul.hsaco"
    spec = {"dtype": "f16", "BLOCK": 1024, "num_warps": 4, "num_stages": 1, "n_class": "plain"}
    doc = json.loads(_ok(run_cli(env, "compile", "--family", "triton_mul", "--arch", "gfx1250", "--lane", "llvm24",
                                 "--spec", json.dumps(spec), "-o", str(out), "--json", timeout=600)).stdout)
    assert doc["code_object"]["kernel"] == "mul_kernel" and doc["toolchain"]["triton_version"] == "3.9.0"
    asm = subprocess.run([OBJDUMP, "-d", "--mcpu=gfx1250", str(out)], capture_output=True, text=True,
                         check=True).stdout
    assert re.search(r"v_mul_f16|v_pk_mul_f16", asm) and re.search(r"global_load|buffer_load", asm)
