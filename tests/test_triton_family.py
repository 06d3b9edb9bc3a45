"""Triton kernels as a family kind, built ahead of time on this CPU-only machine by Triton's own compiler.

References the code under test did not produce: Triton's get_cache_key over a hand-written
ASTSource (tests/_triton_ref.py, run under the Triton install), llvm-readelf-22 / llvm-objdump-22
on the stored code objects, and the lane registry.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.builder import build
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.toolchains.triton_jit import TritonToolchain
from rocke_aot.cache.store import Store
from rocke_aot.errors import ToolchainError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family

REPO = Path(__file__).resolve().parents[1]
OBJDUMP = shutil.which("llvm-objdump-22") or "/usr/lib/llvm-22/bin/llvm-objdump"
READELF = shutil.which("llvm-readelf-22") or "/usr/lib/llvm-22/bin/llvm-readelf"
ONE_CLASS = {"m_class": "div16", "n_class": "div16", "k_class": "div16"}
HIP_CFG = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2)


def _triton(all_toolchains, lane: str) -> TritonToolchain:
    found = tcs.toolchains_for_lane(get_lane(lane), all_toolchains, consumes="triton")
    if not found:
        pytest.fail(f"no Triton on the {lane} lane here: run `bash scripts/setup.sh` (llvm24: the llvm24 lane's "
                    "triton 3.9; llvm22: `rocke-aot toolchain install triton==3.6.0 --python python3.12`)")
    return found[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory, all_toolchains):
    """One matmul variant for gfx942, gfx950, gfx1250 (Triton 3.9, llvm24) and one for sm_90
    (Triton 3.6, llvm22), and one softmax for sm_90, in one store."""
    _triton(all_toolchains, "llvm24"), _triton(all_toolchains, "llvm22")
    url = str(tmp_path_factory.mktemp("triton") / "cache.sqlite")
    where = {**{k: str(v) for k, v in HIP_CFG.items()}, **ONE_CLASS}
    with Store.open(url) as store:
        s1 = build(arches=[Target.parse(a) for a in ("gfx942", "gfx950", "gfx1250")], families=["triton_matmul"],
                   lanes=["llvm24"], store=store, toolchains=all_toolchains, where=where, jobs=2)
        s2 = build(arches=[Target.parse("sm_90")], families=["triton_matmul"], lanes=["llvm22"], store=store,
                   toolchains=all_toolchains, where={"BLOCK_M": "128", "BLOCK_N": "256", **ONE_CLASS}, jobs=2)
        s3 = build(arches=[Target.parse("sm_90")], families=["triton_softmax"], lanes=["llvm22"], store=store,
                   toolchains=all_toolchains, where={"BLOCK": "1024", "cols_class": "div16"}, jobs=2)
        arts = {(a.family, a.arch): a for a in store.find()}
        blobs = {k: store.get(a.key).code_object for k, a in arts.items()}
        entries = {k: store.triton_entry(a.metadata["triton"]["key"]) for k, a in arts.items()}
    return {"url": url, "summaries": (s1, s2, s3), "arts": arts, "blobs": blobs, "entries": entries}


def test_triton_toolchains_take_their_lane_from_the_llvm_their_hsaco_records(all_toolchains):
    for lane, version, major in (("llvm24", "3.9.0", 24), ("llvm22", "3.6.0", 22)):
        tc = _triton(all_toolchains, lane)
        info = tc.detect()
        assert info.extra["triton_version"] == version and info.llvm_major == major
        assert set(info.arches) >= {"gfx90a", "gfx942", "gfx950", "gfx1250", "sm_90"}
        ident = tc.identity(Target.parse("gfx942"))
        assert ident["triton_version"] == version and len(ident["triton_key_sha256"]) == 64
    # an LLVM-IR family never gets a Triton toolchain, and a Triton family never an LLVM one
    assert all(t.kind != "triton" for t in tcs.toolchains_for_lane(get_lane("llvm22"), all_toolchains))
    with pytest.raises(ToolchainError, match="no Triton built on LLVM 20"):
        tcs.toolchain_for(get_lane("llvm20"), Target.parse("gfx942"), all_toolchains, consumes="triton")


def test_admission_per_lane_with_reasons():
    assert not table.admission("triton_matmul", "gfx942", "llvm20").served
    assert "LLVM 23" in table.admission("triton_matmul", "gfx942", "llvm23").reason
    assert table.admission("triton_matmul", "sm_90", "llvm24").served  # Triton 3.9 has NVPTX; the lane profile does not
    refused = table.admission("triton_matmul", "gfx942:xnack-", "llvm22")
    assert not refused.served and "without target features" in refused.reason
    assert table.check_complete() == []


def test_build_stores_validated_code_objects_with_matrix_instructions(built):
    assert [s["built"] for s in built["summaries"]] == [3, 1, 1]
    assert all(not s["failed"] for s in built["summaries"])
    for arch, pattern in (("gfx942", r"v_mfma_f32_\w+_f16"), ("gfx950", r"v_mfma_f32_\w+_f16"),
                          ("gfx1250", r"v_wmma_f32_\w+_f16")):
        raw = built["blobs"][("triton_matmul", arch)]
        info = validate(raw, Target.parse(arch))  # arch, flags, kernel descriptor, resources
        assert info.kernel == "matmul_kernel"
        with_tmp = Path(built["url"]).with_name(f"mm-{arch}.hsaco")
        with_tmp.write_bytes(raw)
        asm = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(with_tmp)], capture_output=True, text=True,
                             check=True).stdout
        assert re.search(pattern, asm), f"no {pattern} in the {arch} matmul"
        notes = subprocess.run([READELF, "--notes", str(with_tmp)], capture_output=True, text=True, check=True).stdout
        # the launch contract's layout is the code object's: 9 arguments + 2 scratch pointers, dynamic LDS
        art = built["arts"][("triton_matmul", arch)]
        launch = art.metadata["launch"]
        args = re.findall(r"\.offset:\s+(\d+)\s+\.size:\s+(\d+)\s+\.value_kind:\s+(\w+)", notes)
        explicit = [(int(o), int(n)) for o, n, kind in args if not kind.startswith("hidden_")]
        assert [(a["offset"], a["size"]) for a in launch["args"]] == explicit  # hidden_*: the runtime's
        assert [a["name"] for a in launch["args"]][-2:] == ["global_scratch", "profile_scratch"]
        assert launch["kernarg_size"] == int(re.search(r"\.kernarg_segment_size:\s+(\d+)", notes).group(1))
        assert re.search(r"\.group_segment_fixed_size:\s+0\b", notes)  # Triton's LDS is dynamic
        assert launch["dynamic_shared_bytes"] == art.metadata["triton"]["shared"] > 0
        assert list(launch["block"]) == [str(4 * (32 if arch == "gfx1250" else 64)), "1", "1"]
    cubin = built["blobs"][("triton_matmul", "sm_90")]
    assert validate(cubin, Target.parse("sm_90")).kernel == "matmul_kernel"


def test_key_is_tritons_own_cache_key(built, all_toolchains):
    """The entry a build files equals get_cache_key(...) of Triton itself, per Triton version."""
    for (arch, lane, cfg) in (("gfx942", "llvm24", HIP_CFG),
                              ("sm_90", "llvm22", dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8,
                                                       num_stages=3))):
        tc = _triton(all_toolchains, lane)
        t = Target.parse(arch)
        backend, a, warp = ("hip", arch, 64) if t.is_amdgpu else ("cuda", "90", 32)
        ref = subprocess.run([tc.python, str(REPO / "tests" / "_triton_ref.py"), str(REPO), backend, a, str(warp),
                              json.dumps(cfg)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert ref.returncode == 0, ref.stderr[-2000:]
        entry = built["arts"][("triton_matmul", arch)].metadata["triton"]
        assert entry["key"] == ref.stdout.strip().splitlines()[-1]
        assert entry["triton_version"] == tc.detect().extra["triton_version"]


def test_entries_are_what_a_hosts_triton_looks_up(built):
    for k, art in built["arts"].items():
        entry = art.metadata["triton"]
        files = built["entries"][k]
        name = entry["name"]
        assert set(files) == {f"__grp__{name}.json", f"{name}.json", entry["binary"]}
        assert files[entry["binary"]].blob_sha256 == art.blob_sha256  # the code object is the binary
        assert {f.source for f in files.values()} == {"build"} and files[f"{name}.json"].artifact_key == art.key
    with Store.open(built["url"]) as store:
        art = built["arts"][("triton_softmax", "sm_90")]
        files = store.triton_entry(art.metadata["triton"]["key"])
        grp = json.loads(store.get_blob(files["__grp__softmax_kernel.json"].blob_sha256))
        assert grp == {"child_paths": sorted(["softmax_kernel.cubin", "softmax_kernel.json"])}
        meta = json.loads(store.get_blob(files["softmax_kernel.json"].blob_sha256))
        assert meta["name"] == "softmax_kernel" and meta["triton_version"] == "3.6.0" and meta["num_warps"] == 4
        assert meta["target"] == {"backend": "cuda", "arch": 90, "warp_size": 32}


def test_rebuild_compiles_nothing_and_a_problem_selects_by_specialization(built, all_toolchains):
    from rocke_aot.aot.builder import compile_count

    before = compile_count()
    with Store.open(built["url"]) as store:
        s = build(arches=[Target.parse("sm_90")], families=["triton_softmax"], lanes=["llvm22"], store=store,
                  toolchains=all_toolchains, where={"BLOCK": "1024", "cols_class": "div16"})
    assert compile_count() == before and s["built"] == 0 and s["cached"] == 1
    fam = get_family("triton_softmax")
    spec = fam.spec_from(dict(built["arts"][("triton_softmax", "sm_90")].spec))
    assert fam.model.accepts(spec, fam.problem_from({"rows": 8, "cols": 1024})) is None
    assert "specializes" in fam.model.accepts(spec, fam.problem_from({"rows": 8, "cols": 1000}))
    assert "BLOCK=2048" in fam.model.accepts(spec, fam.problem_from({"rows": 8, "cols": 2048}))
    assert sys.executable  # the builder itself never imported triton
    assert "triton" not in sys.modules


def test_the_runner_launches_a_triton_artifact_from_its_contract(built):
    """What bench --run-from-cache does before the GPU: the reference it verifies against, the
    kernel-argument buffer at the code object's offsets (scratch pointers included), the shared
    memory to launch with."""
    import struct

    from rocke_aot.launch import LaunchContract
    from rocke_aot.runner.run import pack, reference_of

    assert reference_of("triton_matmul") == "gemm" and reference_of("gemm") == "gemm"
    art = built["arts"][("triton_matmul", "sm_90")]
    contract = LaunchContract.from_dict(art.metadata["launch"])
    plan = contract.plan(get_family("triton_matmul").problem_from({"m": 4096, "n": 2048, "k": 1024}))
    assert plan.grid == (4096 // 128 * (2048 // 256), 1, 1) and plan.block == (256, 1, 1)
    ptrs = {a.name: 0x1000 * (i + 1) for i, a in enumerate(plan.args) if a.kind == "global_pointer"}
    buf = pack(plan, ptrs).buffer
    by = {a.name: a for a in plan.args}
    assert struct.unpack_from("<iii", buf, by["M"].offset) == (4096, 2048, 1024)
    assert struct.unpack_from("<i", buf, by["stride_am"].offset) == (1024,)
    assert struct.unpack_from("<Q", buf, by["profile_scratch"].offset) == (ptrs["profile_scratch"],)
    assert contract.dynamic_shared_bytes == art.metadata["triton"]["shared"] > 48 * 1024
