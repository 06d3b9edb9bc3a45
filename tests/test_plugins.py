"""Family plugins: entry points, the example package, keys, and broken plugins.

    install checks        a plugin's entry point that is not a Family, a grid refusing without
                          a reason, a table function raising: PluginError naming the plugin,
                          nothing registered (in process)
    plugin_lowerer        a lowerer that raises, returns something else, or defines other
                          arguments: PluginError naming the plugin; a SpecError passes (in process)
    the example           examples/plugin-rowsoftmax installed for real (tests/_plugins.py): loaded
                          once and lazily, its family half imports no compiler; listed by
                          `rocke-aot families` and `variants` like a built-in; its kernel run on the
                          CPU simulator (tests/_host_sim.py) equals numpy's softmax; built for gfx942
                          and sm_90 by `rocke-aot build`, each code object read back by llvm-readelf,
                          selected, served by a real `rocke-aot serve` (whose environment also holds
                          broken plugins) and fetched byte for byte
    keys                  the plan key covers the plugin's code (a comment moves it, nothing is
                          compiled: the code object is found by its IR); a plugin whose lowering
                          changes gets new keys and is compiled; a second plugin emitting the same
                          IR shares the code object
    broken plugins        an import error, an entry point that is not a Family, a grid that refuses
                          without a reason, a lowerer that raises: each named with its distribution by
                          `rocke-aot families` (exit 1); variants, build, select and serve work for the rest
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from _plugins import EXAMPLE, example_installed, install_example, plugin_env, run_cli, run_py, write_dist
from _service import HTTP_TIMEOUT_S, serve_process

from rocke_aot.aot.families import plugin_lowerer
from rocke_aot.aot.lower import lower
from rocke_aot.cache.store import Store
from rocke_aot.errors import PluginError, SpecError
from rocke_aot.families.conv_direct_fwd.lower import lower_conv_direct_fwd
from rocke_aot.families.gemm.lower import lower_gemm
from rocke_aot.families.gemm.model import GEMM as GEMM_MODEL
from rocke_aot.lanes import LANE_NAMES, get_lane
from rocke_aot.launch import ArgDef, LaunchFormulas
from rocke_aot.targets import Target
from rocke_aot.variants import families as registry
from rocke_aot.variants.families import Family, FamilySource, Reference, install
from rocke_aot.variants.table import SERVE, FamilyTable, Refuse, audit_table

READELF = shutil.which("llvm-readelf-22") or "/usr/lib/llvm-22/bin/llvm-readelf"
OBJDUMP = shutil.which("llvm-objdump-22") or "/usr/lib/llvm-22/bin/llvm-objdump"
SRC = FamilySource("plugin", "rocke-aot-test-plugin", "1.2.3", "tiny", "tiny_plugin:FAMILY")


# -- install: the checks, in process (nothing is registered by a refusal) -------------------------

@dataclass(frozen=True)
class TinySpec:
    threads: int = 64
    path: str = "fma"

    def to_dict(self):
        return {"path": self.path, "threads": self.threads}

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    @property
    def kernel_name(self):
        return f"tiny_t{self.threads}"

    def geometry(self, target):
        return SimpleNamespace(threads=self.threads)

    def launch_formulas(self):
        return LaunchFormulas(("n",), (("tiles", "n"),), ("n", "1", "1"), (ArgDef("N", "scalar", "i32", "n"),))


@dataclass(frozen=True)
class TinyProblem:
    n: int


def _tiny(**table_changes) -> Family:
    t = FamilyTable("tiny", {lane: SERVE for lane in LANE_NAMES}, baked=lambda target, lane: ({},),
                    knobs=lambda baked, target, lane: {"threads": (64, 128)},
                    make_spec=lambda baked, knobs: TinySpec(**baked, **knobs), check=lambda spec, target: None,
                    spec_from_dict=TinySpec.from_dict)
    return Family("tiny", TinySpec, TinyProblem, dataclasses.replace(t, **table_changes), GEMM_MODEL)


def _refused(obj, source=SRC) -> PluginError:
    with pytest.raises(PluginError) as e:
        install(obj, source)
    assert str(e.value).startswith("plugin tiny (rocke-aot-test-plugin 1.2.3, entry point tiny_plugin:FAMILY): ")
    assert e.value.plugin == "tiny" and e.value.distribution == "rocke-aot-test-plugin"
    assert "tiny" not in registry.FAMILIES
    return e.value


def _raise(exc):
    raise exc


def test_a_good_table_audits_clean():
    assert audit_table(_tiny().table, TinySpec) == []
    for fam in registry.builtin_family_names():  # the built-ins' lane decisions, as install checks them
        assert registry.get_family(fam).table.audit(registry.get_family(fam).spec_type, grid=False) == []


def test_install_refuses_what_is_not_a_usable_family_naming_the_plugin():
    assert "not a rocke_aot.variants.families.Family" in str(_refused({"name": "tiny"}))
    assert "named 'tiny' but its Family is 'tiny2'" in str(_refused(dataclasses.replace(
        _tiny(), name="tiny2", table=dataclasses.replace(_tiny().table, family="tiny2"))))
    unfrozen = dataclasses.make_dataclass("Loose", [("n", int)])
    assert "problem_type 'Loose' is not a frozen dataclass" in str(_refused(dataclasses.replace(
        _tiny(), problem_type=unfrozen)))
    assert "model is a dict" in str(_refused(dataclasses.replace(_tiny(), model={})))
    # a grid that refuses a combination without a reason
    msg = str(_refused(_tiny(lane_decisions={**{lane: SERVE for lane in LANE_NAMES}, "llvm20": Refuse("  ")})))
    assert "lane 'llvm20' is refused without a reason" in msg
    msg = str(_refused(_tiny(make_spec=lambda baked, knobs: _raise(SpecError("never")))))
    assert re.search(r"gfx\w+/llvm\d+: served with an empty grid: .* refused without a reason", msg), msg
    msg = str(_refused(_tiny(make_spec=lambda baked, knobs: _raise(ZeroDivisionError("oops")))))
    assert "raised ZeroDivisionError: oops" in msg and "SpecError or CapabilityError" in msg
    msg = str(_refused(_tiny(arch_rule=lambda target, lane: 42)))
    assert "arch_rule returned a int, not None or a reason" in msg
    msg = str(_refused(_tiny(spec_from_dict=lambda d: TinySpec(threads=1))))
    assert "spec_from_dict(to_dict()) gives" in msg
    msg = str(_refused(_tiny(paths=lambda target, lane: ("fma", "tensorcore"))))
    assert "a path is one of mfma, wmma, mma, fma" in msg
    # a name another family has: refused, the first one kept (a family folder's, which rocke-aot declares
    # through its own entry points: a Triton one and a native one)
    for name, first in (("triton_matmul", r"plugin triton_matmul \(rocke-aot [^,]*, entry point "
                                          r"rocke_aot\.families\.triton_matmul\.family:FAMILY\)"),
                        ("gemm", r"plugin gemm \(rocke-aot [^,]*, entry point rocke_aot\.families\.gemm\.family:FAMILY\)")):
        fam = registry.get_family(name)
        taken = FamilySource("plugin", "rocke-aot-test-plugin", "1.2.3", name, "x:FAMILY")
        with pytest.raises(PluginError, match=rf"plugin {name} .*: family {name} is already registered \({first}"):
            install(dataclasses.replace(_tiny(), name=name, table=dataclasses.replace(_tiny().table, family=name)),
                    taken)
        assert registry.get_family(name) is fam


def test_ownership_comes_from_the_declaring_distribution_not_the_module_path(monkeypatch):
    """FamilySource.own: a family is rocke-aot's own when the distribution that declares its entry point
    is rocke-aot (every family rocke-aot ships, each an entry point of its pyproject.toml); then install
    neither enumerates its grid nor guards it. Another distribution's entry point naming a module under
    rocke_aot/families/ is that plugin's: grid enumerated (a table function raising is refused), guarded."""
    for name in registry.builtin_family_names():  # every family rocke-aot ships: declared by rocke-aot itself
        src = registry.family_source(name)
        assert src.own and src.kind == "plugin" and src.distribution == "rocke-aot", (name, src)
        assert src.value.startswith("rocke_aot.families."), (name, src)
    assert {"gemm", "conv_direct_fwd", "conv_dgrad_patch", "attention", "triton_attention", "triton_matmul",
            "triton_softmax"} <= set(registry.builtin_family_names())
    kept = []
    monkeypatch.setattr(registry, "register", lambda family, source=None: kept.append(family) or family)

    def raising_knobs(baked, target, lane):
        raise RuntimeError("knob grid blew up")

    fam = _tiny(knobs=raising_knobs)
    own = FamilySource("plugin", registry.OWN_DISTRIBUTION, "0.1.0", "tiny", "somewhere.else:FAMILY")
    assert own.own and install(fam, own) is fam  # no grid enumeration, not guarded: the object itself
    posing = FamilySource("plugin", "rocke-aot-lookalike", "1.0", "tiny", "rocke_aot.families.tiny.family:FAMILY")
    assert not posing.own
    with pytest.raises(PluginError, match=r"plugin tiny \(rocke-aot-lookalike 1\.0.*RuntimeError"):
        install(fam, posing)
    plain = _tiny()
    guarded = install(plain, posing)
    assert guarded is not plain and guarded is kept[-1]  # the guarded copy (_guarded) is what registers


def test_a_reference_is_checked_at_install_and_guarded_after():
    """Family.reference (what bench --run-from-cache verifies against): malformed, refused naming
    the plugin; a plugin's reference raising later is a PluginError naming it."""
    def compute(p, v):
        return v["N"]

    for bad, why in ((Reference("", compute, terms=lambda p: 1), "reference.output must name the argument"),
                     (Reference("Y", compute), "give exactly one of terms (a sum of products) and bound"),
                     (Reference("Y", compute, terms=lambda p: 1, bound=lambda *a: 0), "give exactly one of terms"),
                     (Reference("Y", 42, terms=lambda p: 1), "reference.compute must be callable"),
                     ({"output": "Y"}, "reference is a dict, not a rocke_aot.variants.families.Reference")):
        assert why in str(_refused(dataclasses.replace(_tiny(), reference=bad)))
    guarded = registry._guarded(dataclasses.replace(_tiny(), reference=Reference("Y", lambda p, v: 1 // 0,
                                                                                 terms=lambda p: 1)), SRC)
    with pytest.raises(PluginError, match=r"^plugin tiny .*: reference.compute of family tiny raised "
                                          r"ZeroDivisionError"):
        guarded.reference.compute(TinyProblem(1), {})
    assert guarded.reference.terms(TinyProblem(1)) == 1 and guarded.reference.bound is None


# -- plugin_lowerer: a plugin's lowerer failing, named ---------------------------------------------

def test_a_plugin_lowerer_is_wrapped_and_every_failure_names_the_plugin():
    src = FamilySource("plugin", "rocke-aot-test-plugin", "1.2.3", "gemm", "x:FAMILY")
    spec, target, lane = registry.get_family("gemm").spec_type(), Target.parse("gfx942"), get_lane("llvm22")
    prefix = re.escape("plugin gemm (rocke-aot-test-plugin 1.2.3, entry point x:FAMILY): the lowerer of family gemm ")
    good = plugin_lowerer(lower_gemm, "gemm", src)(spec, target, lane)
    assert good == lower("gemm", spec, target, lane)  # the same IR and the same launch contract
    with pytest.raises(PluginError, match=prefix + "raised ZeroDivisionError"):
        plugin_lowerer(lambda s, t, ln: 1 // 0, "gemm", src)(spec, target, lane)
    with pytest.raises(PluginError, match=prefix + "returned a int, not a LoweredKernel"):
        plugin_lowerer(lambda s, t, ln: 42, "gemm", src)(spec, target, lane)
    conv = registry.get_family("conv_direct_fwd").spec_type()
    with pytest.raises(PluginError, match=prefix + "returned a kernel of family 'conv_direct_fwd'"):
        plugin_lowerer(lambda s, t, ln: lower_conv_direct_fwd(conv, t, ln), "gemm", src)(spec, target, lane)
    other_args = lambda s, t, ln: dataclasses.replace(lower_gemm(s, t, ln), kernargs=lower_gemm(s, t, ln).kernargs[:3])  # noqa: E731
    with pytest.raises(PluginError, match=prefix + ".*are not the family's"):
        plugin_lowerer(other_args, "gemm", src)(spec, target, lane)
    with pytest.raises(SpecError, match="not on purpose"):  # a refusal of the plugin's own passes as it is
        plugin_lowerer(lambda s, t, ln: _raise(SpecError("not on purpose")), "gemm", src)(spec, target, lane)


# -- the example plugin, installed for real ---------------------------------------------------------

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The site holding the example plugin (None: this environment has it, scripts/setup.sh)."""
    if example_installed():
        return None
    return install_example(tmp_path_factory.mktemp("plugins") / "example-site")


_TEMPLATE = '''
import dataclasses
from rocke_aot.errors import SpecError
from rocke_aot.variants.families import Family
from rocke_aot.variants.table import Refuse, SERVE
from rocke_rowsoftmax.family import MODEL, ROWSOFTMAX_TABLE, RowSoftmaxProblem, RowSoftmaxSpec

NAME = {name!r}


@dataclasses.dataclass(frozen=True)
class Spec(RowSoftmaxSpec):
    pass


def make(baked, knobs):
    return Spec(**baked, **knobs)


TABLE = dataclasses.replace(ROWSOFTMAX_TABLE, family=NAME, make_spec=make, spec_from_dict=Spec.from_dict)
{extra}
FAMILY = Family(NAME, Spec, RowSoftmaxProblem, TABLE, MODEL, "a test plugin")
'''


def _dist(site: Path, dist: str, name: str, extra: str = "", lower: str | None = None) -> None:
    mod = name + "_plugin"
    modules = {f"{mod}/__init__.py": _TEMPLATE.format(name=name, extra=extra)}
    eps = {"rocke_aot.families": {name: f"{mod}:FAMILY"}}
    if lower is not None:
        modules[f"{mod}/lower.py"] = lower
        eps["rocke_aot.lowerers"] = {name: f"{mod}.lower:lower"}
    write_dist(site, dist, modules, eps)


BROKEN = {  # family (entry point) name -> what the error says
    "brokenimport": "importing broken_import_plugin:FAMILY raised ModuleNotFoundError: No module named 'rocke_no_such'",
    "notafamily": "the entry point gives a dict, not a rocke_aot.variants.families.Family",
    "silent": "served with an empty grid",
    "noreason": "lane 'llvm22' is refused without a reason",
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """A site of small distributions: four broken at load, one whose lowerer raises, one twin of
    the example emitting the same IR under another family name, one whose model raises when ranking."""
    site = tmp_path_factory.mktemp("plugins") / "broken-site"
    write_dist(site, "rocke-aot-broken-import", {"broken_import_plugin.py": "import rocke_no_such\n"},
               {"rocke_aot.families": {"brokenimport": "broken_import_plugin:FAMILY"}})
    write_dist(site, "rocke-aot-not-a-family", {"not_a_family_plugin.py": "FAMILY = {'name': 'notafamily'}\n"},
               {"rocke_aot.families": {"notafamily": "not_a_family_plugin:FAMILY"}})
    _dist(site, "rocke-aot-silent", "silent", extra=(
        "def make(baked, knobs):\n    raise SpecError('no point of this grid lowers')\n\n\n"
        "TABLE = dataclasses.replace(TABLE, make_spec=make)\n"))
    _dist(site, "rocke-aot-noreason", "noreason", extra=(
        "TABLE = dataclasses.replace(TABLE, lane_decisions={**TABLE.lane_decisions, 'llvm22': Refuse('')})\n"))
    _dist(site, "rocke-aot-raising", "raising", lower="def lower(spec, target, lane):\n    return 1 // 0\n")
    twin = ("import dataclasses\nfrom rocke_rowsoftmax.lower import lower_rowsoftmax\n\n\n"
            "def lower(spec, target, lane):  # the example's IR, byte for byte, under another family name\n"
            "    return dataclasses.replace(lower_rowsoftmax(spec, target, lane), family=NAME)\n")
    _dist(site, "rocke-aot-rowsoftmax-twin", "twin", lower="NAME = 'twin'\n" + twin)
    _dist(site, "rocke-aot-badmodel", "badmodel", lower="NAME = 'badmodel'\n" + twin, extra=(
        "def efficiency(spec, problem, info):\n    return {}['no such key']\n\n\n"
        "MODEL = dataclasses.replace(MODEL, efficiency=efficiency)\n"))
    return site


def _json(res: subprocess.CompletedProcess, rc: int = 0):
    assert res.returncode == rc, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout)


_LAZY = r'''
import importlib.metadata, json, sys
sys.modules["llvmlite"] = None  # a service host: no compiler installed
calls = []
real = importlib.metadata.entry_points
def counted(**kw):
    calls.append(kw.get("group"))
    return real(**kw)
importlib.metadata.entry_points = counted
import rocke_aot.variants.families as r
out = {"after_import": "rocke_rowsoftmax" in sys.modules}
r.get_family("triton_matmul")
out["after_first_lookup"] = "rocke_rowsoftmax" in sys.modules
out["own_after_first_lookup"] = sorted(m for m in sys.modules if m.count(".") == 2 and m.startswith("rocke_aot.families."))
fams = r.family_names()
out["after_names"] = "rocke_rowsoftmax" in sys.modules
r.family_names(); r.get_family("rowsoftmax"); list(r.FAMILIES)
out.update(families=list(fams), calls=calls, family_half="rocke_rowsoftmax.family" in sys.modules,
           lower_half="rocke_rowsoftmax.lower" in sys.modules, source=r.get_family("rowsoftmax").source.as_dict())
print(json.dumps(out))
'''


def test_the_example_loads_once_lazily_and_its_family_half_needs_no_compiler(example):
    out = _json(run_py(plugin_env(example), _LAZY))
    assert out["after_import"] is False  # nothing read before it is needed ...
    # ... a lookup by name loads that family only (variants/families.py, "By name") ...
    assert out["after_first_lookup"] is False and out["own_after_first_lookup"] == ["rocke_aot.families.triton_matmul"]
    assert out["after_names"] is True  # ... and every family is a plugin: listing them reads them all
    # the entry points by name: rocke-aot's own family folders (every family it ships) like the example
    assert out["families"] == sorted(out["families"])
    assert {"gemm", "conv_direct_fwd", "triton_matmul", "attention", "rowsoftmax"} <= set(out["families"])
    assert out["calls"] == ["rocke_aot.families"]  # one read of the entry points, whatever the lookups
    assert out["family_half"] and not out["lower_half"]  # llvmlite blocked: the family half imports none
    assert out["source"] == {"kind": "plugin", "distribution": "rocke-aot-rowsoftmax", "version": "0.1.0",
                             "plugin": "rowsoftmax", "value": "rocke_rowsoftmax.family:FAMILY"}


def test_the_example_is_listed_and_its_grid_served_and_refused_like_a_builtin(example, tmp_path):
    env = plugin_env(example, home=tmp_path / "home")
    rows = {r["family"]: r for r in _json(run_cli(env, "families", "--json"))}
    assert rows["rowsoftmax"]["status"] == "ok" and rows["rowsoftmax"]["lowerer"] == "ok"
    assert rows["rowsoftmax"]["from"] == "plugin rowsoftmax (rocke-aot-rowsoftmax 0.1.0, entry point " \
                                         "rocke_rowsoftmax.family:FAMILY)"
    assert rows["triton_matmul"]["from"] == ("plugin triton_matmul (rocke-aot 0.1.0, entry point "
                                             "rocke_aot.families.triton_matmul.family:FAMILY)")
    assert rows["triton_matmul"]["lowerer"] == "ok"  # the Triton kind's, attached by kind
    assert rows["conv_direct_fwd"]["from"] == ("plugin conv_direct_fwd (rocke-aot 0.1.0, entry point "
                                               "rocke_aot.families.conv_direct_fwd.family:FAMILY)")
    # a family folder of rocke-aot's own (rocke_aot/families/gemm) is declared like the example
    assert rows["gemm"]["from"] == "plugin gemm (rocke-aot 0.1.0, entry point rocke_aot.families.gemm.family:FAMILY)"
    assert rows["gemm"]["status"] == "ok" and rows["gemm"]["lowerer"] == "ok"
    doc = _json(run_cli(env, "variants", "--family", "rowsoftmax", "--json"))
    assert doc["holes"] == [] and doc["plugin_errors"] == []
    got = {(r["arch"], r["lane"]): r for r in doc["rows"]}
    # 3 dtypes x threads 32..512: wave64 archs drop 32 (not a whole wave), wave32 archs keep it
    assert got["gfx942", "llvm22"]["count"] == 3 * 4 and got["sm_90", "llvm22"]["count"] == 3 * 5
    assert got["gfx1250", "llvm22"]["count"] == 3 * 5 and got["gfx950", "llvm24"]["count"] == 3 * 4
    assert got["gfx942", "llvm22"]["paths"]["fma"] == "served" and "no mfma path" in got["gfx942", "llvm22"]["paths"]["mfma"]
    assert not got["gfx1250", "llvm20"]["served"] and got["gfx1250", "llvm20"]["reason"] == "LLVM 20 (llvm20) has no gfx1250 target"
    assert not got["sm_90", "llvm24"]["served"] and "has no sm_90 target" in got["sm_90", "llvm24"]["reason"]
    assert got["gfx942", "llvm22"]["backing"] == "unvalidated"  # no IR goldens of a plugin's family


_SIM = r'''
import json, numpy as np
from _host_sim import CpuGrid
from rocke_aot.aot.lower import lower

def bf16(x):  # round to nearest even, as the kernel's fptrunc does
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)

out = {}
rng = np.random.default_rng(7)
for arch, wave, threads in (("gfx942", 64, 64), ("sm_90", 32, 32)):
    for dtype in ("f32", "f16", "bf16"):
        for rows, cols in ((3, 5), (4, 200)):  # fewer columns than threads; a ragged last pass
            k = lower("rowsoftmax", {"dtype": dtype, "threads": threads, "path": "fma"}, arch, "llvm22")
            x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
            if dtype == "f32":
                xin, y = x, np.zeros_like(x)
                xf = x
            elif dtype == "f16":
                xin, y = x.astype(np.float16), np.zeros((rows, cols), np.float16)
                xf = xin.astype(np.float32)
            else:
                xin, y = bf16(x), np.zeros((rows, cols), np.uint16)
                xf = (xin.astype(np.uint32) << 16).view(np.float32)
            CpuGrid(k, wave_size=wave).launch(rows, xin, y, rows, cols)
            yf = (y.astype(np.uint32) << 16).view(np.float32) if dtype == "bf16" else y.astype(np.float32)
            ref = np.exp(xf.astype(np.float64) - xf.max(1, keepdims=True))
            ref /= ref.sum(1, keepdims=True)
            out[f"{arch}/{dtype}/{rows}x{cols}"] = float(np.abs(yf - ref).max())
print(json.dumps(out))
'''


def test_the_example_kernel_equals_numpy_softmax_on_the_cpu_simulator(example):
    """The lowered IR itself (gfx942 wave64, sm_90 warps of 32) run by tests/_host_sim.py."""
    errs = _json(run_py(plugin_env(example), _SIM))
    assert len(errs) == 12
    for case, err in errs.items():
        # the output's own rounding: f32 ~1e-7, f16 2**-11 near 1, bf16 2**-8 near 1
        tol = {"f32": 1e-6, "f16": 2 ** -11, "bf16": 2 ** -8}[case.split("/")[1]]
        assert err <= tol, (case, err)


def _readelf(*args: str) -> str:
    return subprocess.run([READELF, *args], capture_output=True, text=True, check=True).stdout


def test_the_example_builds_validates_selects_serves_and_fetches(example, broken, tmp_path):
    env = plugin_env(example, home=tmp_path / "home")
    cache = tmp_path / "c.sqlite"
    built = _json(run_cli(env, "build", "--arch", "gfx942", "--arch", "sm_90", "--lane", "llvm22", "--family",
                          "rowsoftmax", "--where", "threads=256", "--cache", str(cache), "--json"))
    assert built["built"] == 6 and built["compiles"] == 6 and not built["failed"] and built["plugin_errors"] == []
    with Store.open(cache) as store:
        arts = {(a.arch.split(":")[0], a.spec["dtype"]): a for a in store.find(family="rowsoftmax")}
        blobs = {k: store.get(a.key).code_object for k, a in arts.items()}
    assert len(arts) == 6
    for (arch, dtype), a in arts.items():
        f = tmp_path / f"{arch}-{dtype}.bin"
        f.write_bytes(blobs[arch, dtype])
        name = f"rowsoftmax_{dtype}_t256"
        if arch == "gfx942":
            notes = _readelf("--notes", str(f))
            assert re.search(rf"\.name:\s+{name}\b", notes) and "amdhsa.target:   amdgcn-amd-amdhsa--gfx942" in notes
            assert re.search(r"\.kernarg_segment_size:\s+24\b", notes)  # X, Y (8 bytes), R, C (4 bytes)
            assert re.search(r"\.group_segment_fixed_size:\s+1024\b", notes)  # 256 f32 of reduction scratch
            assert re.search(r"\.max_flat_workgroup_size:\s+256\b", notes)
            assert [m for m in re.findall(r"\.name:\s+(\w+)", notes) if m in "XYRC"] == ["X", "Y", "R", "C"]
            dis = subprocess.run([OBJDUMP, "-d", "--mcpu=gfx942", str(f)], capture_output=True, text=True,
                                 check=True).stdout
            assert "v_exp_f32" in dis and "s_barrier" in dis  # the exp and the tree reductions
        else:
            syms = _readelf("-s", "-W", str(f))
            assert re.search(rf"FUNC\s+GLOBAL\s+\S+(?:\s+\[[^\]]*\])?\s+\d+\s+{name}$", syms, re.M), syms
            assert f".nv.shared.{name}" in _readelf("-S", "-W", str(f))
        launch = a.metadata["launch"]
        assert tuple(launch["grid"]) == ("rows", "1", "1") and tuple(launch["block"]) == ("256", "1", "1")

    problem = {"rows": 4096, "cols": 3000, "dtype": "f16"}
    sel = _json(run_cli(env, "select", "--arch", "gfx942", "--family", "rowsoftmax", "--problem", json.dumps(problem),
                        "--cache", str(cache), "--explain", "--json"))
    assert [c["key"] for c in sel["accepted"]] == [arts["gfx942", "f16"].key] and sel["model"] == "hardware"
    why = {r["key"]: r["reason"] for r in sel["rejected"]}  # the service's shape: "rule: detail"
    assert why[arts["gfx942", "f32"].key] == "spec does not accept the problem: dtype: problem is f16, spec is baked for f32"
    assert set(why) == {arts["gfx942", "f32"].key, arts["gfx942", "bf16"].key}  # sm_90's are not gfx942 candidates

    # A real server whose environment also holds broken plugins: it serves the example, says why not the rest.
    with serve_process(f"sqlite:///{cache}", env=plugin_env(example, broken, home=tmp_path / "home")) as (_, base):
        r = httpx.post(base + "/v1/select", json={"arch": "gfx942", "family": "rowsoftmax", "problem": problem}, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200 and r.json()["accepted"][0]["key"] == arts["gfx942", "f16"].key
        bad = httpx.post(base + "/v1/select", json={"arch": "gfx942", "family": "brokenimport", "problem": problem}, timeout=HTTP_TIMEOUT_S)
        assert bad.status_code == 422 and "rocke-aot-broken-import" in bad.text and "rocke_no_such" in bad.text
        for key_of in (arts["gfx942", "f16"], arts["sm_90", "bf16"]):
            out = tmp_path / f"fetched-{key_of.key[:8]}"
            res = run_cli(env, "fetch", "--server", base, "--insecure", "--local", str(tmp_path / "client"),
                          key_of.key, "-o", str(out))
            assert res.returncode == 0, res.stderr
            assert hashlib.sha256(out.read_bytes()).hexdigest() == key_of.sha256
            assert out.read_bytes() == blobs[key_of.arch.split(":")[0], key_of.spec["dtype"]]


# -- keys: a plugin's code is covered ---------------------------------------------------------------

def _copy_example(site: Path, edit) -> Path:
    """The example's package with ``edit(name, text)`` applied to each module, beside its dist-info."""
    modules = {f"rocke_rowsoftmax/{p.name}": edit(p.name, p.read_text())
               for p in sorted((EXAMPLE / "rocke_rowsoftmax").glob("*.py"))}
    return write_dist(site, "rocke-aot-rowsoftmax", modules, {
        "rocke_aot.families": {"rowsoftmax": "rocke_rowsoftmax.family:FAMILY"},
        "rocke_aot.lowerers": {"rowsoftmax": "rocke_rowsoftmax.lower:lower_rowsoftmax"}})


def test_the_key_covers_the_plugins_code_and_equal_ir_shares_the_code_object(example, broken, tmp_path):
    cache = tmp_path / "c.sqlite"
    home = tmp_path / "home"
    args = ("build", "--arch", "gfx942", "--lane", "llvm22", "--where", "threads=128", "--where", "dtype=f32",
            "--cache", str(cache), "--json")

    def build(env, family="rowsoftmax"):
        return _json(run_cli(env, *args, "--family", family))

    def keys(family="rowsoftmax"):
        with Store.open(cache) as s:
            return {a.key: a.ir_sha256 for a in s.find(family=family)}

    def code_objects():  # compiled once per equal compiler input (cache/code_objects.py), read raw
        with sqlite3.connect(cache) as db:
            return db.execute("SELECT count(*) FROM code_objects WHERE status = 'ok'").fetchone()[0]

    first = build(plugin_env(example, home=home))
    assert first["built"] == 1 and first["compiles"] == 1
    k0, blobs0 = keys(), code_objects()
    # a comment in the plugin: every plan key moves, the IR does not, nothing is compiled
    commented = _copy_example(tmp_path / "commented", lambda n, t: t + "\n# a comment\n" if n == "family.py" else t)
    probe = run_py(plugin_env(commented), "import rocke_rowsoftmax; print(rocke_rowsoftmax.__file__)")
    assert probe.stdout.startswith(str(commented)), probe  # the copy is the one imported
    again = build(plugin_env(commented, home=home))
    assert again["built"] == 1 and again["compiles"] == 0 and again["reused"] == 1
    k1 = keys()
    assert len(k1) == 2 and set(k0) < set(k1) and set(k1.values()) == set(k0.values()) and code_objects() == blobs0
    # a lowering change (the LDS array renamed): new plan keys, new IR, compiled (the bytes may come
    # out equal, an internal symbol's name need not survive linking: the key is the compiler's input)
    moved = _copy_example(tmp_path / "moved", lambda n, t: t.replace('"rowsoftmax_red"', '"rowsoftmax_lds"'))
    third = build(plugin_env(moved, home=home))
    assert third["built"] == 1 and third["compiles"] == 1
    new = {k: ir for k, ir in keys().items() if k not in k1}
    assert len(new) == 1 and not set(new.values()) & set(k1.values())
    assert code_objects() == blobs0 + 1
    # another plugin emitting the example's IR byte for byte: its own plan keys, the same code objects
    twin = build(plugin_env(example, broken, home=home), family="twin")
    assert twin["built"] == 1 and twin["compiles"] == 0 and twin["reused"] == 1
    assert set(keys("twin").values()) == set(k0.values()) and not set(keys("twin")) & (set(k1) | set(new))
    assert code_objects() == blobs0 + 1


# -- broken plugins: named, and the rest works -------------------------------------------------------

def test_broken_plugins_are_named_and_every_other_family_works(example, broken, tmp_path):
    env = plugin_env(example, broken, home=tmp_path / "home")
    rows = {r["family"]: r for r in _json(run_cli(env, "families", "--json"), rc=1)}
    for name, says in BROKEN.items():
        assert rows[name]["status"] == "error" and says in rows[name]["error"], rows[name]
        assert rows[name]["error"].startswith(f"plugin {name} (rocke-aot-"), rows[name]["error"]
    assert rows["raising"]["status"] == "ok" and rows["raising"]["lowerer"] == "ok"  # it loads; it fails when run
    assert all(rows[f]["status"] == "ok" for f in (*registry.builtin_family_names(), "rowsoftmax", "twin"))

    doc = _json(run_cli(env, "variants", "--arch", "gfx942", "--lane", "llvm22", "--json"))
    listed = {r["family"] for r in doc["rows"]}
    assert set(registry.builtin_family_names()) | {"rowsoftmax", "raising", "twin", "badmodel"} == listed
    assert not set(BROKEN) & listed
    assert len(doc["plugin_errors"]) == 4 and doc["holes"] == []

    cache = tmp_path / "c.sqlite"
    res = run_cli(env, "build", "--arch", "gfx942", "--lane", "llvm22", "--family", "rowsoftmax", "--family", "raising",
                  "--family", "badmodel", "--where", "threads=256", "--where", "dtype=f32", "--cache", str(cache),
                  "--json")
    out = _json(res, rc=1)  # the raising lowerer is a failed job; the example's kernel (and its twin) built
    assert out["built"] == 2 and out["compiles"] == 1 and len(out["failed"]) == 1 and len(out["plugin_errors"]) == 4
    fail = out["failed"][0]
    assert fail["family"] == "raising" and fail["error"].startswith(
        "PluginError: plugin raising (rocke-aot-raising 0.1.0, entry point raising_plugin:FAMILY): "
        "the lowerer of family raising raised ZeroDivisionError"), fail
    named = run_cli(env, "build", "--arch", "gfx942", "--lane", "llvm22", "--family", "silent", "--cache", str(cache))
    assert named.returncode == 1 and "Error: PluginError: plugin silent (rocke-aot-silent 0.1.0" in named.stderr
    sel = run_cli(env, "select", "--arch", "gfx942", "--family", "rowsoftmax", "--problem",
                  '{"rows": 64, "cols": 1000}', "--cache", str(cache), "--json")
    assert len(_json(sel)["accepted"]) == 1
    sel = run_cli(env, "select", "--arch", "gfx942", "--family", "brokenimport", "--problem", "{}", "--cache", str(cache))
    assert sel.returncode == 1 and "PluginError: plugin brokenimport (rocke-aot-broken-import 0.1.0" in sel.stderr
    # a model that raises when a problem is ranked: named, not a traceback
    sel = run_cli(env, "select", "--arch", "gfx942", "--family", "badmodel", "--problem", '{"rows": 64, "cols": 1000}',
                  "--cache", str(cache))
    assert sel.returncode == 1 and "Traceback" not in sel.stderr, sel.stderr
    assert ("Error: PluginError: plugin badmodel (rocke-aot-badmodel 0.1.0, entry point badmodel_plugin:FAMILY): "
            "model.efficiency of family badmodel raised KeyError") in sel.stderr, sel.stderr
