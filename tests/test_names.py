"""One name per concept: no two classes of the product share a name (a reader who meets
`Candidate` or `KernelArg` finds one definition), except the pairs listed below, each a wire
model beside its value type or a worker process's own copy."""

from __future__ import annotations

import ast
import collections

from _product import product_files, rel

# name -> why two definitions stand (left as they are; a new duplicate fails the test)
KNOWN = {
    "Resources": "service/schemas.py is the wire model of rocke_aot/candidates.py's value type",
    "Rejection": "service/schemas.py is the wire model of variants/selection.py's value type",
    "HandlerError": "each compile worker runs alone in a lane interpreter and defines its own",
    "Outcome": "a golden case's outcome (aot/golden.py) vs a build job's (aot/builder/run.py)",
    "Hole": "a variant-table hole (variants/table.py) vs an audit hole (aot/audit.py)",
    "Source": "a client fetch source (client/sources.py) vs a bench candidate source (runner/bench.py)",
    "Refusal": "a build plan's refused (family, arch, lane) vs the time model's refused arch (variants/hw_model.py)",
}


def _classes() -> dict[str, list[str]]:
    found = collections.defaultdict(list)
    for p in product_files():
        for node in ast.walk(ast.parse(p.read_text(), rel(p))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(rel(p))
    return found


def test_one_class_per_name():
    dup = {n: where for n, where in _classes().items() if len(where) > 1 and n not in KNOWN}
    assert dup == {}, f"two classes share a name (rename one, or say why in KNOWN): {dup}"


def test_the_argument_model_and_the_candidate_have_one_definition_each():
    classes = _classes()
    assert classes["Candidate"] == ["candidates.py"]
    for name in ("ArgDef", "KernelArg", "BoundArg"):
        assert classes[name] == ["launch.py"], name
    # the lowering's old argument type is gone: its kernargs are launch.KernelArgs
    assert "KernArg" not in classes and "KernArgs" not in classes
