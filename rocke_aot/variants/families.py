"""The family registry: one ``Family`` object per kernel family, found by one name; every layer reads it.

    Family(name="gemm",                 rocke_aot/families/gemm/family.py FAMILY
           spec_type=GemmSpec,          families/gemm/spec.py (to_dict/from_dict, geometry,
                                        launch_formulas: grid, tile count, arguments)
           problem_type=GemmProblem,    variants/problems.py (the matmul operation's)
           table=TABLE,                 families/gemm/table.py (knob grid, lane decisions)
           model=MODEL,                 families/gemm/model.py (accepts, efficiency, work, counts)
           reference=REFERENCE)         what it computes, for `bench --run-from-cache` to verify
                                        against: Reference(output, compute, flops, terms | bound);
                                        families/gemm/reference.py, as a plugin declares its
                                        numpy / torch one (runner/reference.py runs it)

    where families come from (one install path, the same checks for all):
        rocke-aot's own  the family folders (rocke_aot/families/<name>/: gemm, conv_direct_fwd,
                   conv_dgrad_patch, attention, triton_attention, triton_matmul, triton_softmax):
                   entry points of rocke-aot's own pyproject.toml, loaded exactly as a plugin's;
                   own by their source alone (FamilySource.own: the declaring distribution is
                   rocke-aot), so their grids are not enumerated at install nor their functions
                   guarded (rocke-aot's tests check them)
        plugins    entry points of the group ``rocke_aot.families`` (ENTRY_POINT_GROUP), read
                   through importlib.metadata once, lazily, on the first lookup below (a
                   lookup by name loads that name's only: "By name" below):
                       [project.entry-points."rocke_aot.families"]
                       rowsoftmax = "rocke_rowsoftmax.family:FAMILY"      (name == Family.name)
                   ep.load() -> install(obj, FamilySource(plugin ...)); a failure is a
                   PluginError (rocke_aot/errors.py) naming the entry point and its
                   distribution, kept in plugin_errors(): that family is absent (get_family
                   of its name raises that error), every other family works
        register(family)   the in-process call (tests, a script): install without the grid audit
    install checks: a Family; name == the entry point's name and a key name ([a-z][a-z0-9_]*);
        spec_type / problem_type frozen dataclasses; model a Model; reference None or a
        Reference (output named, compute callable, one of terms / bound); table.audit(spec_type) (the
        lane decisions have reasons; for a plugin (not rocke-aot's own, FamilySource.own) also every (arch, lane) of the grid: an
        empty served grid or a table function raising anything but SpecError/CapabilityError
        is refusing without a reason, variants/table.py audit_table); a plugin's table, model
        and reference functions are then guarded: what they raise later but a RockeError is a PluginError
        naming the plugin (the registered Family is that guarded copy of the entry point's)
    register_lowerer(name, lowerer)   the aot half, against the same name: a plugin's, and a
        family folder's (gemm, conv_direct_fwd, conv_dgrad_patch, attention), from its
        ``rocke_aot.lowerers`` entry point, loaded by aot/families/__init__.py on the family's first
        lookup (the aot floor: it wraps every lowerer with the launch contract); a Triton family's
        is the Triton kind's (aot/families/triton.py)

    get_family(name) -> Family     the one lookup: .spec_type, .problem_type, .table, .model,
                                   .lowerer, .source, .launch(spec, problem, target), .spec_from(d);
                                   a name not registered yet loads the entry points of that name
                                   only (below, "by name"), every other lookup reads them all
    family_names() / builtin_family_names() / family_for_spec(spec) / problem_from_dict(family, d)
    FAMILIES (read-only mapping)   every lookup reads plugins in first (once per process)
    family_source(name) -> FamilySource    built in, or plugin: entry point, distribution, version
    plugin_errors() -> (PluginError, ...)  the plugins that failed to load, each naming itself
    failed_plugins() -> {name: (FamilySource, PluginError)}   the same, with where each came from

By name: a process that asks for one family by name (a GPU host checking a kernel's launch
contract: client/contracts.py) imports that family and no other. get_family(name), for a name not
registered, loads the entry points of ``name`` and of every name whose entry point's home (its
module's folder under rocke_aot/families/, else its top-level package) is shared with them,
in the order of the whole read; the first lookup that needs every family (family_names(),
FAMILIES, an unknown name, ...) reads the rest then. What is registered is what reading them
all gives, in the same order: the same-name rule (the first of a name wins) sees every entry
point of that name; a spec type can be shared only by entry points of one home (the owner rule,
_spec_owner_problem), which load together; the whole read puts the families loaded by name
back in their entry points' order (FAMILIES' installation order); and an in-process register()
after a lookup reads them all first, as that lookup would have. One difference remains,
documented: a plugin whose import itself looks another family up (a lookup inside an import
reads no entry point, as before) sees what is registered by then, which by name may be less.

Why two registrations for one object: a family has a variants half (its spec, problem, grid
and model: data and arithmetic, what a service host with no compiler needs) and an aot half
(its lowerer, which builds LLVM IR). Layers import one way, variants below aot, so the Family
is registered here with the variants half, and the lowerer is attached from aot/ by name; the
Family's ``lowerer`` reads it (a named SpecError where no aot half was loaded, never a silent
None). A family's lowering code (a plugin's, or a folder of rocke_aot/families/) is outside the
recipe's modules, and its key covers its own packages (aot/recipe.py family_digest).

``entry.launch(spec, problem, target)`` -> LaunchPlan(grid, block, args in kernarg order)
    = LaunchContract.build(spec.launch_formulas(), spec.geometry(target).threads).plan(problem)
The launch contract an artifact stores (aot/builder) is built from the same formulas, with
the argument layout read back from the compiled code object.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import rocke_aot
from rocke_aot.errors import FamilyMixError, PluginError, RockeError, SpecError
from rocke_aot.lanes import Lane
from rocke_aot.launch import LaunchContract, LaunchFormulas, LaunchPlan
from rocke_aot.targets import Target
from rocke_aot.variants._fields import check_known
from rocke_aot.variants.models import Model

ENTRY_POINT_GROUP = "rocke_aot.families"  # name = family name, value = "module:attr" of a Family
LOWERER_GROUP = "rocke_aot.lowerers"  # name = family name, value = "module:function" (aot/families)
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")  # the key's rule for a family name (cache/keys.py)

_log = logging.getLogger(__name__)
_REGISTRY: dict[str, Family] = {}
_SOURCES: dict[str, FamilySource] = {}
_LOWERERS: dict[str, Callable[..., Any]] = {}
_FAILED: dict[str, tuple[FamilySource, PluginError]] = {}  # entry point name -> (source, why not installed)
_LOCK = threading.Lock()
_DISCOVERY = threading.RLock()  # re-entrant: a plugin's import may look a family up
_STATE = ["new"]  # "new" -> "running" -> "done"
_NAMED: set[str] = set()  # names whose entry points were loaded by name (_discover_named), before the whole read
_LOOKED = [False]  # a lookup missed (get_family): the whole read would have run then (register() reads it first)
_EPS: list[list[importlib.metadata.EntryPoint]] = []  # the family entry points, read once per process
_IMPORTERS: set[int] = set()  # threads importing a plugin (import_entry_point): lookups inside skip the lock
DEFAULT_IMPORT_TIMEOUT_S = 20.0  # a plugin import that takes longer is a PluginError (ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S)


@dataclass(frozen=True)
class FamilySource:
    """Where a family came from: built into rocke-aot, or a plugin's entry point."""

    kind: str  # "builtin" | "plugin" | "registered" (register() from outside rocke_aot)
    distribution: str  # the distribution that declares it ("rocke-aot" for the built-ins)
    version: str
    plugin: str = ""  # the entry point's name (== the family's name); "" when built in
    value: str = ""  # the entry point's "module:attr", or the module that registered it

    @property
    def builtin(self) -> bool:
        return self.kind == "builtin"

    @property
    def own(self) -> bool:
        """rocke-aot's own family, decided by where it came from and nothing else: the distribution
        that declares its entry point (importlib.metadata's, read by plugin_source) is rocke-aot
        itself (OWN_DISTRIBUTION), or it was registered in-process from inside rocke_aot (BUILTIN,
        the same distribution). Not by the module an entry point names: a plugin's entry point
        pointing into rocke_aot/families/ is still that plugin's. rocke-aot's grids are checked by
        its own tests (check_complete), so install neither enumerates an own family's grid nor
        guards its functions; every other distribution's family gets both."""
        return self.distribution == OWN_DISTRIBUTION

    def describe(self) -> str:
        if self.kind == "plugin":
            return f"plugin {self.plugin} ({self.distribution} {self.version}, entry point {self.value})"
        if self.kind == "builtin":
            return f"built in ({self.distribution} {self.version})"
        return f"registered by {self.value}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "distribution": self.distribution, "version": self.version,
                "plugin": self.plugin, "value": self.value}


OWN_DISTRIBUTION = "rocke-aot"  # the distribution rocke_aot is installed as (pyproject.toml [project] name)
# an in-process registration from inside rocke_aot (register() without a source)
BUILTIN = FamilySource("builtin", OWN_DISTRIBUTION, rocke_aot.__version__, "", "rocke_aot")


class _Families(Mapping):
    """FAMILIES: the registry's read-only view (name -> Family, in installation order); reading it
    reads the plugins in first, like every other lookup."""

    def __getitem__(self, name: str) -> Family:
        _discover()
        return _REGISTRY[name]

    def __iter__(self) -> Iterator[str]:
        _discover()
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        _discover()
        return len(_REGISTRY)

    def __contains__(self, name: object) -> bool:
        _discover()
        return name in _REGISTRY

    def __repr__(self) -> str:
        return f"FAMILIES({list(self)})"


FAMILIES: Mapping[str, Family] = _Families()


def optional_torch() -> Any:
    """torch where it is installed (a family's reference then runs on the GPU when there is one),
    else None: the references of gemm and the conv families compute through it or through numpy."""
    try:
        import torch
    except ImportError:
        return None
    return torch


@dataclass(frozen=True)
class Reference:
    """What a family's kernel computes, for `bench --run-from-cache` to check every output against
    (runner/reference.py runs it; numpy or torch inside the functions, imported there: a service
    host loads the family half without either).

    output   the kernel argument it writes (its launch contract's name, e.g. "Y"); every other
             pointer argument is an input, filled with values uniform in [-1, 1) (runner/reference.py
             inputs) and given to ``compute`` as exact float64 arrays, flat, by argument name
    compute(problem, inputs) -> the exact output as a flat float64 array
    flops(problem) -> the operations one run does (for TFLOP/s); None: not reported
    the error bound of a correct kernel, one of:
      terms(problem) -> the products summed into one output element (a sum of products: the
             runner's Higham bound of f32 accumulation plus one rounding of the output)
      bound(problem, inputs, reference, out_dtype) -> the largest error allowed per element
             (float64 array, the reference's shape), for any other computation
    inputs(problem, name, dtype, count, rng) -> (storage, float64 values) of an input that is not
             uniform data (an index array: attention's i32 block table and cu_seqlens), or None
    """

    output: str
    compute: Callable[[Any, Mapping[str, Any]], Any]
    flops: Callable[[Any], int] | None = None
    terms: Callable[[Any], int] | None = None
    bound: Callable[[Any, Mapping[str, Any], Any, str], Any] | None = None
    # inputs(problem, name, dtype, count, rng) -> (storage array, float64 values), or None for a
    # uniform input: the values of an argument that is not data (an i32 block table, cu_seqlens)
    inputs: Callable[[Any, str, str, int, Any], Any] | None = None

    def problems(self) -> list[str]:
        """What is wrong with this declaration (empty: nothing)."""
        out = []
        if not isinstance(self.output, str) or not self.output:
            out.append(f"reference.output must name the argument the kernel writes, got {self.output!r}")
        if not callable(self.compute):
            out.append("reference.compute must be callable (problem, inputs) -> the exact output")
        if self.flops is not None and not callable(self.flops):
            out.append("reference.flops must be callable or None")
        if (self.terms is None) == (self.bound is None):
            out.append("reference: give exactly one of terms (a sum of products) and bound (any other error bound)")
        elif not callable(self.terms if self.terms is not None else self.bound):
            out.append("reference.terms / reference.bound must be callable")
        if self.inputs is not None and not callable(self.inputs):
            out.append("reference.inputs must be callable or None")
        return out


class VariantTable(Protocol):
    """What the registry asks of a family's variant table (variants/table.py FamilyTable, the one
    kind install() admits: its audit refuses any other). A protocol here, so the registry names no
    module above it: variants/table.py reads the registry, never the reverse."""

    @property
    def family(self) -> str: ...

    @property
    def check(self) -> Callable[[Any, Target], Any]: ...  # raises SpecError/CapabilityError: the spec cannot run

    # the grid's functions (variants/table.py FamilyTable's fields)
    @property
    def baked(self) -> Callable[[Target, Lane], Sequence[Mapping[str, Any]]]: ...

    @property
    def knobs(self) -> Callable[[Mapping[str, Any], Target, Lane], Mapping[str, Sequence[Any]]]: ...

    @property
    def make_spec(self) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Any]: ...

    @property
    def spec_from_dict(self) -> Callable[[Mapping[str, Any]], Any]: ...

    @property
    def arch_rule(self) -> Callable[[Target, Lane], str | None]: ...

    @property
    def paths(self) -> Callable[[Target, Lane], Sequence[str]]: ...

    def audit(self, spec_type: type, *, grid: bool = True, limit: int = 5) -> list[str]: ...


@dataclass(frozen=True)
class Family:
    """One kernel family: everything about it, found by its name (``get_family(name)``)."""

    name: str
    spec_type: type[Any]  # frozen dataclass: to_dict/from_dict, kernel_name, geometry, launch_formulas
    problem_type: type  # frozen dataclass of the runtime shape
    table: VariantTable  # the knob grid per (arch, lane) and every lane decision (variants/table.py)
    model: Model  # accepts(spec, problem), efficiency (variants/models.py)
    description: str = ""
    reference: Reference | None = None  # what it computes (bench --run-from-cache verifies against it)
    # What it computes, shared by the families that compute the same thing on the same problem type
    # (gemm and triton_matmul: "matmul"): a select may rank such families' candidates together.
    # "" means its own name (a family alone in its operation).
    operation: str = ""

    @property
    def op(self) -> str:
        """The operation it computes (``operation``, else its own name)."""
        return self.operation or self.name

    @property
    def lowerer(self) -> Callable[..., Any]:
        """(spec, Target, Lane) -> LoweredKernel: the aot half, registered against this name by
        ``register_lowerer`` (rocke_aot.aot.families does it for the built-in families, and
        its get_family loads a plugin's from the ``rocke_aot.lowerers`` entry point)."""
        fn = _LOWERERS.get(self.name)
        if fn is None:
            raise SpecError(f"family {self.name} has no lowerer in this process: its aot half registers one "
                            f"(look it up through rocke_aot.aot.families.get_family, which loads the "
                            f"built-in lowerers and a plugin's {LOWERER_GROUP} entry point)")
        return fn

    @property
    def source(self) -> FamilySource:
        """Built in, or the plugin (entry point, distribution, version) that declared it."""
        return family_source(self.name)

    def spec_from(self, spec: object) -> Any:
        """A spec of this family from an instance or its canonical dict."""
        if isinstance(spec, self.spec_type):
            return spec
        if isinstance(spec, dict):
            return self.spec_type.from_dict(spec)
        raise SpecError(f"family {self.name}: a spec must be a {self.spec_type.__name__} or a dict, "
                        f"got {type(spec).__name__}")

    def problem_from(self, problem: object) -> Any:
        if isinstance(problem, self.problem_type):
            return problem
        if isinstance(problem, dict):
            check_known(self.problem_type, problem, f"{self.name} problem")
            missing = [f.name for f in dataclasses.fields(self.problem_type) if f.init and f.name not in problem
                       and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
            if missing:  # one line naming each field, not the constructor's TypeError
                raise SpecError(f"{self.name} problem: missing the field{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)} (given: {', '.join(sorted(problem)) or 'none'})")
            try:
                return self.problem_type(**problem)
            except TypeError as e:  # a required field is missing
                raise SpecError(f"{self.name} problem: {e}") from None
        raise SpecError(f"a {self.name} spec takes a {self.problem_type.__name__}, got {type(problem).__name__}")

    def formulas(self, spec: object) -> LaunchFormulas:
        return self.spec_from(spec).launch_formulas()

    def launch(self, spec: object, problem: object, target: object) -> LaunchPlan:
        """Grid, block and the kernel arguments (kernarg order, types, values) for one problem.

        Refuses (SpecError with the reason) a problem the spec cannot run: another baked
        filter or dtype, a tensor over the 32-bit offset limit.
        """
        sp, pr = self.spec_from(spec), self.problem_from(problem)
        why = self.model.accepts(sp, pr)
        if why:
            raise SpecError(f"{sp.kernel_name} cannot run this {self.name} problem: {why}")
        threads = sp.geometry(Target.parse(target)).threads
        return LaunchContract.build(sp.kernel_name, sp.launch_formulas(), (threads, 1, 1)).plan(pr)


def register(family: Family, source: FamilySource | None = None) -> Family:
    """Add a family; a second family of the same name, or a table naming another family, is refused.

    The in-process path (tests, scripts); entry points and the built-ins go through
    :func:`install`, which checks more. ``source`` defaults to built in for a family whose spec
    type is defined inside rocke_aot, else "registered by <that module>".
    """
    if not isinstance(family, Family):
        raise SpecError(f"register() takes a Family, got {type(family).__name__}")
    if family.table.family != family.name:
        raise SpecError(f"family {family.name}: its variant table says {family.table.family}")
    if source is None:
        mod = getattr(family.spec_type, "__module__", "") or ""
        source = BUILTIN if mod.split(".")[0] == "rocke_aot" else FamilySource("registered", "", "", "", mod)
        if _LOOKED[0]:  # a lookup missed before: reading every entry point would have run then
            _discover()
    with _LOCK:
        if family.name in _REGISTRY and _REGISTRY[family.name] is not family:
            raise SpecError(f"family {family.name} is already registered ({_SOURCES[family.name].describe()})")
        if any(f.spec_type is family.spec_type for n, f in _REGISTRY.items() if n != family.name):
            raise SpecError(f"family {family.name}: spec type {family.spec_type.__name__} belongs to another family")
        _REGISTRY[family.name] = family
        _SOURCES.setdefault(family.name, source)
    return family


def _frozen_dataclass(cls: object) -> bool:
    # dataclasses keeps the decorator's arguments in __dataclass_params__ (no public accessor)
    params = getattr(cls, "__dataclass_params__", None)
    return isinstance(cls, type) and dataclasses.is_dataclass(cls) and params is not None and params.frozen


def install(obj: object, source: FamilySource) -> Family:
    """Check a family and register it: the one path of the built-ins and the plugins.

    Raises PluginError (naming ``source``) with every finding; nothing is registered then.
    A plugin's grid is enumerated over every wired arch and decided lane (table.audit); the
    grids of rocke-aot's own families (FamilySource.own: declared by the distribution rocke-aot,
    the folders of rocke_aot/families/) are checked by the tests (check_complete), as enumerating
    them costs seconds per process (gemm's alone 2.4 s of CPU), and their functions are not guarded.
    """
    what = source.describe()
    name = getattr(obj, "name", "?")

    def refuse(why: str) -> PluginError:
        return PluginError(f"{what}: {why}", plugin=source.plugin, distribution=source.distribution,
                           family=name if isinstance(name, str) else "")

    if not isinstance(obj, Family):
        raise refuse(f"the entry point gives a {type(obj).__name__}, not a rocke_aot.variants.families.Family")
    family = obj
    problems = []
    if not isinstance(family.name, str) or not NAME_RE.match(family.name):
        problems.append(f"family name {family.name!r} is not a name like 'gemm' ([a-z][a-z0-9_]*)")
    if source.plugin and family.name != source.plugin:
        problems.append(f"the entry point is named {source.plugin!r} but its Family is {family.name!r} "
                        f"(name each entry point after its family)")
    for field, cls in (("spec_type", family.spec_type), ("problem_type", family.problem_type)):
        if not _frozen_dataclass(cls):
            problems.append(f"{field} {getattr(cls, '__name__', cls)!r} is not a frozen dataclass "
                            f"(@dataclass(frozen=True): specs and problems are hashed and cached)")
    if not isinstance(family.model, Model):
        problems.append(f"model is a {type(family.model).__name__}, not a rocke_aot.variants.models.Model")
    elif not (callable(family.model.accepts) and callable(family.model.efficiency) and callable(family.model.work)):
        problems.append("model.accepts, model.efficiency and model.work must be callable")
    if getattr(family.table, "family", None) != family.name:
        problems.append(f"its variant table says family {getattr(family.table, 'family', None)!r}")
    ref = getattr(family, "reference", None)
    if ref is not None:
        if not isinstance(ref, Reference):
            problems.append(f"reference is a {type(ref).__name__}, not a rocke_aot.variants.families.Reference")
        else:
            problems += ref.problems()
    if not problems and _frozen_dataclass(family.spec_type):
        audit = getattr(family.table, "audit", None)
        if not callable(audit):
            problems.append(f"its table is a {type(family.table).__name__}, not a rocke_aot.variants.table.FamilyTable")
        else:
            problems += audit(family.spec_type, grid=not source.own)
    if problems:
        raise refuse("; ".join(problems))
    if not source.own:
        family = _guarded(family, source)
    try:
        return register(family, source)
    except SpecError as e:
        raise refuse(str(e)) from None


def _spec_owner_problem(spec_type: type, source: FamilySource, family: str) -> str | None:
    """A plugin's spec type must be its own: defined in the package its entry point names (a
    subclass of another family's spec is its own type). Otherwise a plugin loaded first could
    take another plugin's (or a built-in's) spec type, and the rightful family would be refused.
    Two owners are not a package: a Triton family's spec type, which the registry makes for that
    family (variants/triton.py, ``KERNEL.family``), and rocke-aot's own families, whose package is
    their folder (``rocke_aot.families.<name>``)."""
    kernel = getattr(spec_type, "KERNEL", None)
    mod = getattr(spec_type, "__module__", "") or ""
    if mod == "rocke_aot.variants.triton" and getattr(kernel, "family", None) == family:
        return None
    ep_module = source.value.split(":", 1)[0]
    if source.distribution == "rocke-aot" and ep_module.startswith("rocke_aot.families."):
        home = ".".join(ep_module.split(".")[:3])
        if mod == home or mod.startswith(home + "."):
            return None
    else:
        home = ep_module.split(".", 1)[0]
        if mod.split(".", 1)[0] == home and home != "rocke_aot":
            return None
    return (f"spec type {spec_type.__name__} is defined in {mod!r}, not in the plugin's own package {home!r}: "
            f"a family's spec type belongs to the family that defines it (subclass it in your package)")


_TABLE_FUNCTIONS = ("baked", "knobs", "make_spec", "check", "spec_from_dict", "arch_rule", "paths", "baked_for")


def _guarded(family: Family, source: FamilySource) -> Family:
    """The plugin's family with its table and model functions guarded: anything they raise but a
    RockeError (SpecError, CapabilityError: a refusal on purpose) becomes a PluginError naming
    the plugin, wherever it is called (selection on a server, a plan, a report)."""
    def guard(fn: Callable[..., Any] | None, what: str) -> Callable[..., Any] | None:
        if fn is None:
            return None

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except RockeError:
                raise
            except Exception as e:  # noqa: BLE001 - the plugin's code: anything else is its bug
                raise PluginError(f"{source.describe()}: {what} of family {family.name} raised "
                                  f"{type(e).__name__}: {e}", plugin=source.plugin, distribution=source.distribution,
                                  family=family.name) from e
        return guarded

    model_fns: dict[str, Any] = {f.name: guard(getattr(family.model, f.name), f"model.{f.name}")
                                 for f in dataclasses.fields(family.model)}
    model = dataclasses.replace(family.model, **model_fns)
    # install() admits a variants/table.py FamilyTable only (its audit), a frozen dataclass; this
    # module names no table type (the table module reads the registry), so it is read as Any here
    plugin_table: Any = family.table
    table = dataclasses.replace(plugin_table, **{n: guard(getattr(family.table, n), f"table.{n}")
                                                 for n in _TABLE_FUNCTIONS})
    ref = family.reference
    if ref is not None:
        ref_fns: dict[str, Any] = {n: guard(getattr(ref, n), f"reference.{n}")
                                   for n in ("compute", "flops", "terms", "bound")}
        ref = dataclasses.replace(ref, **ref_fns)
    return dataclasses.replace(family, model=model, table=table, reference=ref)


def _discover() -> None:
    """Read the ``rocke_aot.families`` entry points once per process (the first lookup that needs
    them all does); the families loaded by name before keep their place in that order."""
    if _STATE[0] == "done":
        return
    if threading.get_ident() in _IMPORTERS:  # a plugin's import looking a family up: what is registered so far
        return
    with _DISCOVERY:
        if _STATE[0] != "new":  # done meanwhile, or this thread is inside the discovery
            return
        _STATE[0] = "running"
        try:
            moved: set[str] = set()
            for ep in _family_entry_points():
                if ep.name not in _NAMED:
                    _load(ep)
                elif ep.name not in moved:  # loaded by name: where reading them all puts it
                    moved.add(ep.name)
                    _requeue(ep.name)
        finally:
            _STATE[0] = "done"


def _requeue(name: str) -> None:
    """Move the entry point family ``name`` (and its failure) to the end of the registry's order,
    as the whole read would have installed it now (an in-process registration keeps its place)."""
    with _LOCK:
        if name in _REGISTRY and _SOURCES[name].kind == "plugin":
            _REGISTRY[name] = _REGISTRY.pop(name)
        if name in _FAILED:
            _FAILED[name] = _FAILED.pop(name)


def _home(ep: importlib.metadata.EntryPoint) -> str:
    """Where the spec types of ``ep``'s family may live (the owner rule, _spec_owner_problem): its
    module's folder under rocke_aot/families/, else its top-level package. Entry points of
    different homes cannot share a spec type, so their families load in any order alike."""
    parts = ep.value.split(":", 1)[0].strip().split(".")
    return ".".join(parts[:3]) if parts[:2] == ["rocke_aot", "families"] and len(parts) > 2 else parts[0]


def _discover_named(name: str) -> None:
    """Load the entry points of ``name`` and of every name sharing a home with them (module doc,
    "By name"), in the whole read's order; nothing where no entry point has that name (the
    caller reads them all then) or once every entry point is read."""
    if _STATE[0] != "new" or threading.get_ident() in _IMPORTERS:
        return
    with _DISCOVERY:
        if _STATE[0] != "new":
            return
        _LOOKED[0] = True
        eps = _family_entry_points()
        names = {name}
        while True:  # the names sharing a home with those taken, to a fixed point
            homes = {_home(ep) for ep in eps if ep.name in names}
            more = {ep.name for ep in eps if _home(ep) in homes} - names
            if not more:
                break
            names |= more
        names -= _NAMED
        try:
            for ep in eps:
                if ep.name in names:
                    _load(ep)
        finally:
            _NAMED.update(n for n in names if any(ep.name == n for ep in eps))


def _family_entry_points() -> list[importlib.metadata.EntryPoint]:
    """entry_points(ENTRY_POINT_GROUP), read once per process (by name, then all)."""
    with _DISCOVERY:
        if not _EPS:
            _EPS.append(entry_points(ENTRY_POINT_GROUP))
        return _EPS[0]


def entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of ``group``, in a stable order (name, then distribution, then
    value; a distribution's name is read only where two entry points share a name)."""
    eps = list(importlib.metadata.entry_points(group=group))
    seen: dict[str, int] = {}
    for ep in eps:
        seen[ep.name] = seen.get(ep.name, 0) + 1
    return sorted(eps, key=lambda ep: (ep.name, _dist_of(ep)[0] if seen[ep.name] > 1 else "", ep.value))


def _dist_of(ep: importlib.metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", "?"
    return _dist_name_version(dist)


@functools.cache
def _dist_name_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """(Name, Version) of an installed distribution, parsed once per process and distribution (the
    entry points of one distribution share its object)."""
    return dist.metadata["Name"] or "?", dist.version or "?"


def plugin_source(ep: importlib.metadata.EntryPoint) -> FamilySource:
    dist, version = _dist_of(ep)
    return FamilySource("plugin", dist, version, ep.name, ep.value)


def _load(ep: importlib.metadata.EntryPoint) -> None:
    source = plugin_source(ep)
    try:
        if ep.name in _REGISTRY or ep.name in _FAILED:
            other = (_SOURCES[ep.name] if ep.name in _REGISTRY else _FAILED[ep.name][0]).describe()
            raise PluginError(f"{source.describe()}: family {ep.name} is already declared ({other}); "
                              f"a family name belongs to one distribution", plugin=ep.name,
                              distribution=source.distribution, family=ep.name)
        obj = import_entry_point(ep, source, ep.name)
        owner = _spec_owner_problem(obj.spec_type, source, ep.name) if isinstance(obj, Family) else None
        if owner:
            raise PluginError(f"{source.describe()}: {owner}", plugin=ep.name, distribution=source.distribution,
                              family=ep.name)
        install(obj, source)
    except PluginError as e:
        if ep.name in _FAILED:  # a second distribution declaring a failed name: keep the first's record
            _log.warning("family plugin not loaded: %s", e)
            return
        _FAILED[ep.name] = (source, e)
        _log.warning("family plugin not loaded: %s", e)


def import_timeout() -> float:
    """Seconds a plugin's import may take (ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S, else the default)."""
    from rocke_aot import settings

    got = settings.integer(settings.PLUGIN_IMPORT_TIMEOUT_S)
    return DEFAULT_IMPORT_TIMEOUT_S if got is None else float(got)


def import_entry_point(ep: importlib.metadata.EntryPoint, source: FamilySource, family: str,
                       what: str = "") -> Any:
    """``ep.load()`` isolated: in its own daemon thread, waited for at most ``import_timeout()``
    seconds; anything it raises, BaseException included (SystemExit, KeyboardInterrupt: a
    plugin's import never ends the command), and a timeout become a PluginError naming the
    plugin. A timed-out import is left running in its thread, never waited for again."""
    box: dict[str, Any] = {}

    def run() -> None:
        _IMPORTERS.add(threading.get_ident())
        try:
            box["value"] = ep.load()
        except BaseException as e:  # noqa: BLE001 - the plugin's import: whatever it raises is its failure
            box["error"] = e
        finally:
            _IMPORTERS.discard(threading.get_ident())

    timeout = import_timeout()
    thread = threading.Thread(target=run, name=f"rocke-plugin-import-{ep.name}", daemon=True)
    thread.start()
    thread.join(timeout)

    def refuse(why: str) -> PluginError:
        return PluginError(f"{source.describe()}: {what}{why}"[:2000], plugin=source.plugin or ep.name,
                           distribution=source.distribution, family=family)

    if thread.is_alive():
        raise refuse(f"importing {ep.value} did not finish within {timeout:g} s "
                     f"({settings_name()} sets the bound)")
    if "error" in box:
        e = box["error"]
        raise refuse(f"importing {ep.value} raised {type(e).__name__}: {e}") from (e if isinstance(e, Exception)
                                                                                 else None)
    return box["value"]


def settings_name() -> str:
    from rocke_aot import settings

    return settings.PLUGIN_IMPORT_TIMEOUT_S


def plugin_errors() -> tuple[PluginError, ...]:
    """The plugins that failed to load (each error names its entry point and distribution)."""
    _discover()
    return tuple(e for _, e in _FAILED.values())


def failed_plugins() -> dict[str, tuple[FamilySource, PluginError]]:
    """Entry point name -> (its source, why it is not installed), for the plugins that failed."""
    _discover()
    return dict(_FAILED)


def family_source(name: str) -> FamilySource:
    family = get_family(name)
    return _SOURCES[family.name]


def register_lowerer(name: str, fn: Callable[..., Any]) -> None:
    """Attach the aot half of a registered family: ``fn(spec, Target, Lane) -> LoweredKernel``."""
    get_family(name)
    if not callable(fn):
        raise SpecError(f"family {name}: the lowerer must be callable, got {type(fn).__name__}")
    with _LOCK:
        if _LOWERERS.get(name, fn) is not fn:
            raise SpecError(f"family {name} already has a lowerer ({_LOWERERS[name].__qualname__})")
        _LOWERERS[name] = fn


def has_lowerer(name: str) -> bool:
    """Whether the aot half of ``name`` is attached in this process (no lookup, no loading)."""
    return name in _LOWERERS


def family_names() -> tuple[str, ...]:
    _discover()
    return tuple(_REGISTRY)


def family_packages() -> tuple[str, ...]:
    """The top-level packages the families' own code comes from, read without loading a family:
    the package of every family entry point's module (a plugin's spec type lives there, the
    owner rule _spec_owner_problem; "rocke_aot" for rocke-aot's own folders) and those of the
    spec and problem types of the families registered in-process (register()), sorted. What
    code a launch contract check may run (client/contracts.py watches these folders)."""
    out = {ep.value.split(":", 1)[0].strip().split(".")[0] for ep in _family_entry_points()}
    with _LOCK:
        registered = [f for n, f in _REGISTRY.items() if _SOURCES[n].kind != "plugin"]
    for fam in registered:
        for kind in (fam.spec_type, fam.problem_type):
            out.add((getattr(kind, "__module__", "") or "").split(".")[0])
    return tuple(sorted(p for p in out if p))


def builtin_family_names() -> tuple[str, ...]:
    """The families rocke-aot itself ships (its goldens, characterization and tests cover these): the
    families of rocke_aot/families/ that rocke-aot declares through its own entry points (their
    source's distribution is rocke-aot, FamilySource.own; the plugins are read in first), and any
    registered in-process from inside rocke_aot."""
    _discover()
    return tuple(n for n in _REGISTRY if _SOURCES[n].own)


def installed_builtin_names() -> tuple[str, ...]:
    """The families registered in-process from inside rocke_aot (register() without a source), without
    reading the plugins in: what an import-time loop may walk (none by default: every family rocke-aot
    ships comes through its entry points)."""
    return tuple(n for n in _REGISTRY if _SOURCES[n].builtin)


def _unknown(name: object) -> SpecError:
    return SpecError(f"unknown family {name!r}; known: {', '.join(_REGISTRY)}")


def families_for_select(family: object) -> tuple[str, ...]:
    """The families one select ranks together: a name, "a,b" (the CLI's --family gemm,triton_matmul)
    or a list of names, in the order given, each once. Unknown names are get_family's SpecError;
    families of different operations (Family.op) or problem types are FamilyMixError naming each
    family with its operation and problem type (their candidates cannot be compared)."""
    if isinstance(family, str):
        names = [x.strip() for x in family.split(",")]
    elif isinstance(family, (list, tuple)) and all(isinstance(x, str) for x in family):
        names = [x.strip() for x in family]
    else:
        raise SpecError(f"family must be a family name, 'a,b' or a list of names, got {family!r}")
    if not names or any(not x for x in names):
        raise SpecError(f"family: an empty name in {family!r}; known: {', '.join(family_names())}")
    out = tuple(dict.fromkeys(names))
    fams = [get_family(x) for x in out]
    ops = {(f.op, f.problem_type) for f in fams}
    if len(ops) > 1:
        what = ", ".join(f"{f.name} ({f.op} on {f.problem_type.__name__})" for f in fams)
        raise FamilyMixError(f"family: a select across families needs one operation on one problem type; got {what}")
    return out


def get_family(name: object) -> Family:
    if not isinstance(name, str):
        raise SpecError(f"a family name must be a string such as 'gemm', got {type(name).__name__} {name!r}")
    family = _REGISTRY.get(name)
    if family is None:
        _discover_named(name)  # that name's entry points only (module doc, "By name")
        family = _REGISTRY.get(name)
        if family is None and name not in _FAILED:
            _discover()
            family = _REGISTRY.get(name)
        if family is None:
            if name in _FAILED:
                raise _FAILED[name][1]
            raise _unknown(name)
    return family


def family_for_spec(spec: object) -> Family:
    _discover()
    for family in _REGISTRY.values():
        if type(spec) is family.spec_type:
            return family
    raise SpecError(f"no registered family has spec type {type(spec).__name__}")


def problem_from_dict(family: object, d: object) -> Any:
    """The family's problem from JSON (the service): unknown or missing fields refused."""
    if not isinstance(family, str):
        raise SpecError(f"no problem type for family {family!r}; known: {', '.join(family_names())}")
    try:
        entry = get_family(family)
    except SpecError:
        raise SpecError(f"no problem type for family {family!r}; known: {', '.join(family_names())}") from None
    if not isinstance(d, dict):
        raise SpecError(f"a {family} problem must be a mapping, got {type(d).__name__}")
    return entry.problem_from(d)


__all__ = ["BUILTIN", "OWN_DISTRIBUTION", "families_for_select", "ENTRY_POINT_GROUP", "FAMILIES", "Family", "FamilySource", "LOWERER_GROUP", "Reference",
           "VariantTable",
           "builtin_family_names", "entry_points", "failed_plugins", "family_for_spec", "family_names", "family_packages",
           "family_source",
           "get_family", "has_lowerer", "import_entry_point", "install", "installed_builtin_names", "plugin_errors",
           "plugin_source", "problem_from_dict",
           "register", "register_lowerer"]
