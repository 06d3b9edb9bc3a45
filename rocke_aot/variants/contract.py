"""A stored launch contract checked against its family's own formulas, and a spec against its table.

    admit_spec(family, spec_dict, arch, lane) -> spec       the family's admission, as a build
        the table serves (family, arch, lane) (AdmissionError with the table's reason), the dict
        is a spec of the family (its own from_dict and checks: gemm waves=3 is a SpecError), the
        dict is that spec's canonical form (no alias or extra field rides along), the table's
        check on the arch (tile, LDS, thread limits) and its paths (a path the arch lacks)
    check_launch(family, spec, arch, launch) -> LaunchContract   metadata["launch"] of an artifact
        recomputed from spec.launch_formulas() and spec.geometry(arch).threads, field by field:
        kernel name, problem fields, every let, the grid, the block, every argument (name, kind,
        dtype, count formula, access) with the one layout rule (natural_layout), the split axis;
        a disagreement is a LaunchContractError naming the field, what it says and what the family
        computes (a grid 4x too large, an output sized m instead of m * n)
    check_record_launch(family, spec, arch, metadata)   every contract a record carries: its
        "launch" (required) and the lowering's copy in metadata["kernel"] when present
    check_entry(entry)   both, on a bundle entry or a manifest kernel (a dict with its key inputs)

The formulas themselves are compared, not their values on a few problems: a contract equal to
the family's formulas is right for every problem, and any other is refused before it is stored,
signed or launched. Nothing here needs a compiler, a database or a server: publish, bundle import,
signing and a GPU host's client call the same function (variants sits below all of them).
Fields the code object decides (the kernarg size, dynamic shared memory) are checked against the
object itself where it is read (aot/codeobject.py record_metadata), not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.errors import AdmissionError, CapabilityError, LaunchContractError, SpecError
from rocke_aot.lanes import Lane
from rocke_aot.launch import LaunchContract
from rocke_aot.targets import Target
from rocke_aot.variants import families as registry
from rocke_aot.variants import table as tables

_CUT = 160  # characters of a formula or value quoted in an error


def _cut(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= _CUT else text[:_CUT] + "..."


def admit_spec(family: str, spec: Mapping[str, Any], arch: Target | str, lane: Lane | str) -> Any:
    """The family's spec for ``spec`` if a build of (family, arch, lane) could have made it, else
    AdmissionError (the table refuses the combination) or SpecError (the spec is not one the
    family admits there, naming the family's own reason)."""
    fam = registry.get_family(family)
    tables.require_admitted(family, arch, lane)
    if not isinstance(spec, Mapping):
        raise SpecError(f"a {family} spec is a JSON object, got {type(spec).__name__}")
    try:
        got = fam.spec_from(dict(spec))
    except (TypeError, KeyError) as e:
        raise SpecError(f"{family} spec refused: {type(e).__name__}: {_cut(str(e))}") from None
    canonical = got.to_dict()
    if dict(spec) != canonical:
        extra = sorted(set(spec) ^ set(canonical)) or sorted(k for k in spec if spec[k] != canonical.get(k))
        raise SpecError(f"{family} spec is not in the family's canonical form (fields {', '.join(map(str, extra[:6]))} "
                        f"differ from its own to_dict())")
    target = Target.parse(arch) if not isinstance(arch, Target) else arch
    lane_obj = tables.lane_of(lane)
    try:
        fam.table.check(got, target)
    except CapabilityError as e:
        raise SpecError(f"{family} spec refused on {target.id}: {e}") from None
    path = canonical.get("path")
    if isinstance(path, str):
        served = tables.served_paths(tables.family_table(family), target, lane_obj)
        if path not in served:
            raise AdmissionError(f"{family} path {path!r} is not served on {target.id} {lane_obj.name} "
                                 f"(served: {', '.join(served) or 'none'})", reason=f"path {path} not served")
    return got


def expected_contract(family: str, spec: Any, arch: Target | str) -> LaunchContract:
    """The contract the family's formulas give for ``spec`` on ``arch`` (natural layout; kernarg
    size as laid out): what a stored contract is compared with."""
    fam = registry.get_family(family)
    s = fam.spec_from(spec if not isinstance(spec, Mapping) else dict(spec))
    target = Target.parse(arch) if not isinstance(arch, Target) else arch
    threads = s.geometry(target).threads
    return LaunchContract.build(s.kernel_name, s.launch_formulas(), (threads, 1, 1))


def check_launch(family: str, spec: Any, arch: Target | str, launch: Any) -> LaunchContract:
    """``launch`` (a contract's dict) parsed and compared with the family's (module doc);
    LaunchContractError naming the first field that disagrees."""
    if not isinstance(launch, Mapping):
        raise LaunchContractError(f"{family}: a launch contract is an object, got {type(launch).__name__}")
    try:
        got = LaunchContract.from_dict(launch)
    except SpecError as e:
        raise LaunchContractError(f"{family}: malformed launch contract: {_cut(str(e))}") from None
    want = expected_contract(family, spec, arch)

    def refuse(field: str, said: Any, computed: Any) -> LaunchContractError:
        return LaunchContractError(f"{family} {want.kernel}: launch contract {field} is {_cut(said)}; the family's "
                                   f"formulas give {_cut(computed)}")

    for field in ("kernel", "problem", "lets", "grid", "block", "split"):
        if getattr(got, field) != getattr(want, field):
            raise refuse(field, getattr(got, field), getattr(want, field))
    if len(got.args) != len(want.args):
        raise refuse("args", [a.name for a in got.args], [a.name for a in want.args])
    for a, b in zip(got.args, want.args):  # want: the one layout rule (natural_layout)
        for field in ("name", "kind", "dtype", "expr", "access", "offset", "size", "align"):
            if getattr(a, field) != getattr(b, field):
                raise refuse(f"argument {b.name}.{field}", getattr(a, field), getattr(b, field))
    if got.kernarg_size < want.kernarg_size:
        raise refuse("kernarg_size", got.kernarg_size, f">= {want.kernarg_size}")
    if got.max_tensor_bytes > want.max_tensor_bytes:
        raise refuse("max_tensor_bytes", got.max_tensor_bytes, f"<= {want.max_tensor_bytes}")
    return got


def check_record_launch(family: str, spec: Any, arch: Target | str, metadata: Any) -> LaunchContract:
    """Every launch contract an artifact record carries, checked (module doc); the record must
    carry one in metadata["launch"] (a runner launches by it)."""
    if not isinstance(metadata, Mapping):
        raise LaunchContractError(f"{family}: the record's metadata is not an object")
    if metadata.get("launch") is None:
        raise LaunchContractError(f"{family}: the record has no launch contract (metadata.launch): nothing "
                                  "says how to launch it")
    got = check_launch(family, spec, arch, metadata["launch"])
    kernel = metadata.get("kernel")
    if isinstance(kernel, Mapping):
        if kernel.get("launch") is not None:
            check_launch(family, spec, arch, kernel["launch"])
        if kernel.get("kernel_name") not in (None, got.kernel):
            raise LaunchContractError(f"{family}: metadata.kernel.kernel_name {_cut(kernel.get('kernel_name'))} is "
                                      f"not the contract's {got.kernel}")
        if kernel.get("block_size") not in (None, int(got.block[0])):
            raise LaunchContractError(f"{family}: metadata.kernel.block_size {_cut(kernel.get('block_size'))} is "
                                      f"not the contract's block {got.block[0]}")
    return got


def check_entry(entry: Mapping[str, Any]) -> None:
    """A bundle entry or a signed manifest's kernel ({family, spec, arch, lane, metadata, ...}):
    its spec admitted and its launch contract the family's (cache/bundle.py import calls it
    through Store.import_'s ``check_entry``; the CLI passes it)."""
    if not isinstance(entry, Mapping):
        raise SpecError(f"an entry is an object, got {type(entry).__name__}")
    family, spec, arch, lane = (entry.get(n) for n in ("family", "spec", "arch", "lane"))
    if not isinstance(family, str) or not isinstance(spec, Mapping):
        raise SpecError(f"an entry names its family (a string) and its spec (an object), got "
                        f"{type(family).__name__} and {type(spec).__name__}")
    registry.get_family(family)  # an unknown family is named before its arch or lane
    target, lane_obj = Target.parse(arch), tables.lane_of(lane)  # the entry's strings, parsed here once
    admit_spec(family, spec, target, lane_obj)
    check_record_launch(family, spec, target, entry.get("metadata"))


__all__ = ["admit_spec", "check_entry", "check_launch", "check_record_launch", "expected_contract"]
