"""Plugin imports isolated (issue 42): SystemExit / KeyboardInterrupt at import, a slow import, and a
plugin taking another plugin's spec type are each a named broken plugin; every other family works.

Real distributions (a package beside its dist-info, read by importlib.metadata) and the real
`rocke-aot families` command in a subprocess."""

from __future__ import annotations

import json
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
