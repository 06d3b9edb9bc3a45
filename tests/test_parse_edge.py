"""Parse once at the edge (issue 36): a target ID becomes a ``Target`` (targets.py Target.parse) and
a lane name a ``Lane`` (lanes.py get_lane) at the doors of the product only; the layers below take
the typed values and never parse.

    the doors (EDGES)   the CLI's option types, the service's request fields and routes, the
                        clients' public entry points, the documented Python API (lower(),
                        compile_llvmlite), and the deserialization of a stored or sent record
                        (a store row, a JSON report, an instance list, a key's inputs, a
                        toolchain's detection record): each named with its reason
    the debt (DEBT)     below-edge modules that still parse, each with its count and why it is
                        left: the ratchet. A count may only go down (the test fails when a module
                        parses more than listed, and when it parses less: take it down here, so
                        the list only shrinks), and a module listed nowhere may not parse at all.
                        Empty now (the last below-edge parses moved to their doors): a module
                        below the edge that parses fails the test; nothing may be added back here.

A use is any mention of ``Target.parse`` or of ``get_lane`` (called, or passed as a function),
read from the source by AST, never by importing.
"""

from __future__ import annotations

import ast
from collections import Counter

from _product import product_files
from _product import rel as product_rel

# module (relative to rocke_aot/) -> why parsing there is parsing at an edge
EDGES: dict[str, str] = {
    "targets.py": "defines Target.parse (and compatible()/compatible_ids()/target_identity(), "
                  "which read the target IDs of stored rows and old bundles)",
    "lanes.py": "defines get_lane; lane_from_env/resolve_lane read ROCKE_AOT_LANE and the API's explicit lane",
    "cli/cache.py": "cache import: the bundle's records name their arch; the check parses it for validate()",
    "cli/select.py": "device wheels' kpack import: the manifest's records name their arch (as cli/cache.py)",
    "cli/options.py": "the CLI's --arch / --lane option types (a bad value is a usage error, exit 2)",
    "service/fields.py": "the service's request fields (a bad value is HTTP 422)",
    "service/routes/publish.py": "a route: the publish request's lane",
    "service/triton.py": "a Triton cache entry's JSON (deserialization)",
    "service/client.py": "Client.get(arch=...): the builder-side client's public entry point",
    "client/service.py": "ServiceClient.select(arch, ...): a public entry point; the server's rows (deserialization)",
    "client/fetch.py": "Fetcher.get(key, arch=...): the client's public entry point (docs/client.md)",
    "aot/lower/__init__.py": "lower(family, spec, arch, lane): the documented Python API (docs/plugins.md)",
    "aot/compiler/__init__.py": "compile_llvmlite / submit_llvmlite: the documented Python API (docs/compile.md)",
    "aot/agreement.py": "checked_metadata: the arch of a fetched answer's record, parsed where the answer is read",
    "aot/builder/__init__.py": "build(arches, families, lanes, store): the builder's Python API (docs/build.md) "
                               "takes lane names or Lanes, parsed once at its entry; make_plan below takes Lanes",
    "aot/builder/instances.py": "an instance list's JSON (deserialization)",
    "aot/builder/dask_backend.py": "remote_build: a dask worker's arguments, sent as strings (deserialization)",
    "candidates.py": "candidate_of: an artifact's stored fields (a store row, a signed record) become a "
                     "Candidate that carries the parsed Target and Lane, so rank() parses nothing",
    "cache/keys.py": "KeyInputs: a key's inputs are the stored strings; canonicalized where the record is made",
    "cache/measurements.py": "a measurement report's JSON and the store's rows (deserialization)",
    "cache/store.py": "the Store's public methods (docs/cache.md): a filter's or a device's target ID is parsed "
                      "at this door; its parts (artifacts, plans, bundle, kpack, selection_view) take the Target",
    "service/selection.py": "select(store, arch, family, problem, lanes=...): the documented Python API "
                            "(docs/selection.md) that the CLI, the routes and the runner share; rank() below takes "
                            "the Target and the Lanes",
    "variants/contract.py": "check_entry: a stored entry's arch and lane strings; admit_spec/expected_contract "
                            "take a row's target ID",
    "variants/measured.py": "measurement records' arch strings (deserialization)",
    "variants/table.py": "the documented variant-table API (docs/variants.md: admission, enumerate_specs, "
                         "report(family, arch, lane)) takes a target ID or a Target, a lane name or a Lane: "
                         "lane_of() and _target() parse at that door; the table's own functions take the typed values",
    "variants/families.py": "Family.launch(spec, problem, target): the family entry point's public call (the module "
                            "doc), which takes a spec dict, a problem dict and a target ID as spec_from/problem_from do",
    "aot/toolchains/base.py": "Toolchain.lane: the lane a detection record names (ToolchainInfo.lane)",
    "aot/toolchains/drift.py": "the lane a detection record names (ToolchainInfo.lane)",
    "aot/golden.py": "lane_entries: the goldens JSON (package data) names the lane an entry aliases "
                     "(\"alias_of\"), parsed where the document is read (deserialization); check() takes Lanes",
    "torch/runtime.py": "configure(arch=...): rocke_aot.torch's public entry point, and the device's own report "
                        "of its arch (gcnArchName, the compute capability), parsed where it is read",
}

# below-edge module -> (uses left, why they are left); only shrinks. Paid off (issue 36): none
# is left, and a module listed nowhere may not parse at all.
DEBT: dict[str, tuple[int, str]] = {}


def _uses() -> Counter[str]:
    found: Counter[str] = Counter()
    for p in product_files():
        rel = product_rel(p)
        for node in ast.walk(ast.parse(p.read_text(), rel)):
            target_parse = isinstance(node, ast.Attribute) and node.attr == "parse" and \
                isinstance(node.value, ast.Name) and node.value.id == "Target"
            if target_parse or (isinstance(node, ast.Attribute) and node.attr == "get_lane") or \
                    (isinstance(node, ast.Name) and node.id == "get_lane" and isinstance(node.ctx, ast.Load)):
                found[rel] += 1
    return found


def test_only_the_edges_parse_targets_and_lanes():
    uses = _uses()
    below = {m: n for m, n in uses.items() if m not in EDGES}
    unlisted = {m: n for m, n in below.items() if m not in DEBT}
    assert unlisted == {}, ("these modules below the edge parse a target ID or a lane: take a Target / "
                            f"Lane and parse where the string enters (an edge, tests/test_parse_edge.py): {unlisted}")
    grown = {m: (n, DEBT[m][0]) for m, n in below.items() if n > DEBT[m][0]}
    assert grown == {}, f"more parsing below the edge than the debt allows (found, allowed): {grown}"
    paid = {m: (below.get(m, 0), n) for m, (n, _) in DEBT.items() if below.get(m, 0) < n}
    assert paid == {}, f"parsing removed: take these counts down in DEBT (found, listed): {paid}"


def test_the_lists_are_real():
    uses = _uses()
    files = {product_rel(p) for p in product_files()}
    assert set(EDGES) <= files and set(DEBT) <= files
    assert not set(EDGES) & set(DEBT)
    assert all(r.strip() for r in EDGES.values()) and all(r.strip() for _, r in DEBT.values())
    assert DEBT == {}, "the parse-once debt is paid (issue 36): parse at an edge (EDGES), not below it"
    idle = sorted(m for m in EDGES if uses[m] == 0)
    assert idle == [], f"edges that no longer parse: take them off EDGES: {idle}"


# One name per concept (DESIGN.md's vocabulary: an arch is a target ID): a parsed ``Target`` is
# called ``target`` (``device`` where it is the device a code object runs on: compatibility and
# selection); the string a user or a record gives is ``arch`` (the CLI's --arch, the JSON field);
# ``processor`` is the bare processor name (Target.processor), never a Target.
TARGET_NAMES = {"target", "device"}
NEVER = {"dev", "tgt", "target_id"}  # other names once used for the same thing


def _params():
    for p in product_files():
        rel = product_rel(p)
        for node in ast.walk(ast.parse(p.read_text(), rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in a.posonlyargs + a.args + a.kwonlyargs:
                    ann = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    yield f"{rel}:{node.lineno} {node.name}({arg.arg}: {ann})", arg.arg, ann


def test_one_name_for_the_target():
    typed = {"Target", "Target | None"}
    wrong = [w for w, name, ann in _params() if ann in typed and name not in TARGET_NAMES]
    assert wrong == [], f"a Target parameter is called target (or device, the role): {wrong}"
    old = [w for w, name, ann in _params() if name in NEVER and "Target" in ann]
    assert old == [], f"dev / tgt / target_id holding a Target: call it target: {old}"
    processor = [w for w, name, ann in _params() if name == "processor" and "Target" in ann]
    assert processor == [], f"processor is the bare name (Target.processor), not a Target: {processor}"
