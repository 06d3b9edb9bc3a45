"""Plugin imports isolated (issue 42): SystemExit / KeyboardInterrupt at import, a slow import, and a
plugin taking another plugin's spec type are each a named broken plugin; every other family works.

Real distributions (a package beside its dist-info, read by importlib.metadata) and the real
`rocke-aot families` command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from _plugins import example_installed, install_example, plugin_env, run_cli, write_dist

from rocke_aot.variants import families as registry

THIEF = '''
import dataclasses
from rocke_aot.variants.families import Family
from rocke_rowsoftmax.family import MODEL, ROWSOFTMAX_TABLE, RowSoftmaxProblem, RowSoftmaxSpec

# the example plugin's own spec type, under another family name (sorted before "rowsoftmax")
FAMILY = Family("aaathief", RowSoftmaxSpec, RowSoftmaxProblem, dataclasses.replace(ROWSOFTMAX_TABLE, family="aaathief"),
                MODEL, "takes another plugin's spec type")
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("isolation")
    example = None if example_installed() else install_example(d / "example-site")
    s = d / "site"
    for dist, name, body in (("rocke-aot-sysexit", "sysexit", "raise SystemExit(3)\n"),
                             ("rocke-aot-interrupt", "interrupt", "raise KeyboardInterrupt('at import')\n"),
                             ("rocke-aot-slow", "slow", "import time\ntime.sleep(120)\n"),
                             ("rocke-aot-thief", "aaathief", THIEF)):
        write_dist(s, dist, {f"{name}_plugin.py": body}, {"rocke_aot.families": {name: f"{name}_plugin:FAMILY"}})
    return example, s


def test_broken_imports_are_named_within_the_bound_and_every_other_family_works(site, tmp_path):
    example, s = site
    env = {**plugin_env(example, s, home=tmp_path / "home"), "ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S": "3"}
    start = time.monotonic()
    res = run_cli(env, "families", "--json", timeout=120)
    took = time.monotonic() - start
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    rows = {r["family"]: r for r in json.loads(res.stdout)}
    says = {"sysexit": "importing sysexit_plugin:FAMILY raised SystemExit: 3",
            "interrupt": "importing interrupt_plugin:FAMILY raised KeyboardInterrupt: at import",
            "slow": "importing slow_plugin:FAMILY did not finish within 3 s (ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S",
            "aaathief": "spec type RowSoftmaxSpec is defined in 'rocke_rowsoftmax.family', not in the plugin's own "
                        "package 'aaathief_plugin'"}
    for name, text in says.items():
        assert rows[name]["status"] == "error" and text in rows[name]["error"], rows[name]
    assert rows["rowsoftmax"]["status"] == "ok"  # the thief did not take its spec type
    assert all(rows[f]["status"] == "ok" for f in registry.builtin_family_names())
    assert took < 60  # the slow import was not waited for (it sleeps 120 s)


def test_spec_owners_rocke_aots_own_family_folders_and_triton_specs_made_for_their_family():
    """The owner rule admits rocke-aot's own families (their package is their folder) and a Triton
    family's registry-made spec type for that family only; a plugin naming either is refused."""
    from rocke_aot.families.attention.native import AttentionSpec
    from rocke_aot.variants.families import FamilySource, _spec_owner_problem, get_family

    own = FamilySource("plugin", "rocke-aot", "0.1.0", "attention", "rocke_aot.families.attention.native:FAMILY")
    assert _spec_owner_problem(AttentionSpec, own, "attention") is None
    thief = FamilySource("plugin", "evil-plugin", "1.0", "attention2", "evil_pkg.family:FAMILY")
    assert "not in the plugin's own package 'evil_pkg'" in _spec_owner_problem(AttentionSpec, thief, "attention2")
    # another of rocke-aot's folders may not take it either
    other = FamilySource("plugin", "rocke-aot", "0.1.0", "x", "rocke_aot.families.other.family:FAMILY")
    assert _spec_owner_problem(AttentionSpec, other, "x") is not None
    triton_spec = get_family("triton_attention").spec_type
    t_src = FamilySource("plugin", "rocke-aot", "0.1.0", "triton_attention", "rocke_aot.families.attention.triton:FAMILY")
    assert _spec_owner_problem(triton_spec, t_src, "triton_attention") is None
    assert _spec_owner_problem(triton_spec, thief, "attention2") is not None  # made for another family


_PLUGIN = '''
import dataclasses
from rocke_aot.variants.families import Family
from rocke_rowsoftmax.family import MODEL, ROWSOFTMAX_TABLE, RowSoftmaxProblem, RowSoftmaxSpec
{spec}

def family(name):
    table = dataclasses.replace(ROWSOFTMAX_TABLE, family=name, make_spec=lambda b, k: Spec(**b, **k),
                                spec_from_dict=Spec.from_dict)
    return Family(name, Spec, RowSoftmaxProblem, table, MODEL, "a test plugin")
{tail}
'''
_SPEC = "\n\n@dataclasses.dataclass(frozen=True)\nclass Spec(RowSoftmaxSpec):\n    pass\n\n"

_BY_NAME = r'''
import json, sys
from rocke_aot.errors import PluginError
import rocke_aot.variants.families as r
out = {}
def ask(name):
    try:
        return r.get_family(name).source.as_dict()
    except PluginError as e:
        return str(e)
if sys.argv[1] == "by-name":
    out["shareb"] = ask("shareb")
    out["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("sharepkg", "dupa_plugin", "dupb_plugin",
                                                                         "rocke_rowsoftmax")
                           or (m.count(".") == 2 and m.startswith("rocke_aot.families.")))
    out["dupfam"] = ask("dupfam")
    out["attention"] = ask("triton_attention")
else:
    out["all_first"] = list(r.FAMILIES)
    out["shareb"], out["dupfam"], out["attention"] = ask("shareb"), ask("dupfam"), ask("triton_attention")
out["families"] = list(r.FAMILIES)
out["errors"] = [str(e) for e in r.plugin_errors()]
out["sharea"] = ask("sharea")
print(json.dumps(out))
'''


def test_a_lookup_by_name_registers_what_reading_every_entry_point_does(site, tmp_path):
    """get_family(name) loads that name's entry points (and those sharing its home) only; what it
    registers, refuses and the registry's order are what reading every entry point first gives:
    two families of one package sharing a spec type (the first by name wins, either way), one name
    declared by two distributions (the first distribution wins), rocke-aot's attention folder
    holding two families."""
    example, _ = site
    s = tmp_path / "site"
    write_dist(s, "rocke-aot-shared", {
        "sharepkg/__init__.py": _PLUGIN.format(spec=_SPEC, tail=""),
        "sharepkg/a.py": "from sharepkg import family\nFAMILY = family('sharea')\n",
        "sharepkg/b.py": "from sharepkg import family\nFAMILY = family('shareb')\n"},
        {"rocke_aot.families": {"sharea": "sharepkg.a:FAMILY", "shareb": "sharepkg.b:FAMILY"}})
    for d in ("a", "b"):
        write_dist(s, f"rocke-aot-dup{d}", {f"dup{d}_plugin.py": _PLUGIN.format(spec=_SPEC, tail="FAMILY = family('dupfam')")},
                   {"rocke_aot.families": {"dupfam": f"dup{d}_plugin:FAMILY"}})
    env = plugin_env(example, s, home=tmp_path / "home")
    got = {}
    for mode in ("by-name", "all"):
        res = subprocess.run([sys.executable, "-c", _BY_NAME, mode], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        got[mode] = json.loads(res.stdout)
    by, full = got["by-name"], got["all"]
    # by name: the asked name and its home's other name only (no other plugin, no rocke-aot family)
    assert by["loaded"] == ["rocke_rowsoftmax", "rocke_rowsoftmax.family", "sharepkg", "sharepkg.a", "sharepkg.b"]
    assert "spec type Spec belongs to another family" in by["shareb"] and by["shareb"] == full["shareb"]
    assert by["sharea"]["distribution"] == "rocke-aot-shared"
    assert by["dupfam"]["distribution"] == "rocke-aot-dupa" and by["dupfam"] == full["dupfam"]
    assert by["attention"] == full["attention"] and by["attention"]["distribution"] == "rocke-aot"
    assert by["families"] == full["families"] == full["all_first"]  # the registry's order, whatever came first
    assert by["errors"] == full["errors"] and len(by["errors"]) == 2
    assert full["families"].index("sharea") < full["families"].index("triton_attention")
