"""Triton kernels as a family kind: a @triton.jit function, its launch, and its variant grid, as data.

    TritonKernel(family="triton_matmul",
                 module="rocke_aot.kernels.triton_matmul", function="matmul_kernel",
                 params=(TritonParam("a_ptr", "pointer", "$dtype", "m * k", "read_only"), ...,
                         TritonParam("M", "int", expr="m"), ..., TritonParam("BLOCK_M", "constexpr")),
                 problem_type=GemmProblem, problem=("m", "n", "k"),
                 lets=(("tiles", "ceil_div(m, BLOCK_M) * ceil_div(n, BLOCK_N)"),), grid=("tiles", "1", "1"),
                 configs=lambda target: [{"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3}, ...],
                 classes={"m": ("div16", "plain"), ...},      the specializations to prebuild
                 lanes={"llvm22": SERVE, ...})
      -> register_triton(kernel) -> Family(spec_type=<generated frozen dataclass>, problem_type,
                                          table=FamilyTable(...), model=Model(...))
         (variants/families.py's register: the same registry as every family)

    spec fields   the baked dtypes, every constexpr of the config, num_warps, num_stages, and one
                  "<field>_class" per problem field in ``classes`` ("div16" | "plain" | "one")
    specialization   what Triton's JIT binder makes of each argument of a launch (the rule of
                  triton/runtime/jit.py's specialization, as the GPU host applies it):
                  an int equal to 1 -> a constexpr (it leaves the kernel's parameters); an int
                  divisible by 16 -> attribute tt.divisibility=16 ("D"); pointers: 16-byte
                  aligned ("D"; the runner's and torch's allocations are) and, on AMD, within
                  2 GiB ("S", tt.pointer_range=32). The spec's representative problem (each
                  classed field at a value of its class) gives the specialization it is built
                  for; a problem is accepted only when every argument specializes the same
    request(spec, target) -> the compile request the Triton toolchain runs (aot/families/triton.py
                  writes it): module, function, the arguments as Triton's binder will see them,
                  num_warps / num_stages / num_ctas (Config.all_kwargs() of Triton's autotuner)
    launch_formulas  the kernel's parameters after specialization (constexprs and ints == 1
                  gone), then the two pointers Triton appends (global and profile scratch,
                  0 elements: the kernels here use none; a build whose metadata asks for
                  scratch is refused by the lowering's check), grid over problem fields and the
                  config's constexprs; threads = num_warps * warp size; shared memory is
                  dynamic (metadata "shared", as Triton launches it), recorded per artifact

The kernel module is never imported here (a service host has no Triton): its files are hashed
(``sources``), and the hash is part of the plan key through the family's key material.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rocke_aot.arch import ArchInfo
from rocke_aot.dtypes import DTYPE_BYTES, POINTEE_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.launch import ArgDef, LaunchFormulas, bind, evaluate
from rocke_aot.targets import Target
from rocke_aot.variants import families
from rocke_aot.variants._fields import check_known, check_types
from rocke_aot.variants.models import Efficiency, Model, combine, dim
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import FamilyTable, Refuse, Serve

CLASSES = ("div16", "plain", "one")
_REPRESENTATIVE = {"div16": 4096, "plain": 4097, "one": 1}  # a value of each class (i32 range)
TRITON_DTYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "i32": "i32"}
SCRATCH = ("global_scratch", "profile_scratch")  # the pointers Triton appends to every kernel
I32 = (-2**31, 2**31 - 1)
TRITON_COMPILE_INPUT = "triton"


@dataclass(frozen=True)
class TritonParam:
    """One parameter of the @triton.jit function, in order."""

    name: str
    kind: str  # "pointer" | "int" | "constexpr"
    dtype: str = ""  # pointer: element dtype, or "$field" naming a baked spec field
    expr: str = ""  # int: its value; pointer: the elements its buffer holds (formulas over the problem)
    access: str | None = None
    specialize: bool = True  # int: False = do_not_specialize (Triton passes it as a plain i32/i64)
    label: str = ""  # the launch contract's name of the argument (default: the parameter's name)
    # constexpr: the value a spec dict without this field reads as (a knob added to a declared kernel:
    # the dicts written before it, in scripts and stored records, still name a spec); None: required
    default: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("pointer", "int", "constexpr"):
            raise SpecError(f"Triton parameter {self.name}: kind {self.kind!r} not pointer, int or constexpr")
        if self.kind != "constexpr" and not self.expr:
            raise SpecError(f"Triton parameter {self.name}: a {self.kind} needs a formula (expr)")
        if self.kind != "constexpr" and self.default is not None:
            raise SpecError(f"Triton parameter {self.name}: only a constexpr has a default")


@dataclass(frozen=True)
class TritonKernel:
    family: str
    module: str
    function: str
    params: tuple[TritonParam, ...]
    problem_type: type
    problem: tuple[str, ...]
    lets: tuple[tuple[str, str], ...]
    grid: tuple[str, str, str]
    configs: Callable[[Target], Sequence[Mapping[str, int]]]
    baked: tuple[Mapping[str, str], ...]
    classes: Mapping[str, tuple[str, ...]]
    lanes: Mapping[str, Serve | Refuse]
    description: str = ""
    # what it computes, for the runner to verify against: the name of a family whose Reference it
    # shares ("gemm": families/gemm/reference.py), or the family's own Reference (a plugin's, or
    # triton_softmax's: families/triton_softmax/reference.py)
    reference: str | families.Reference = ""
    operation: str = ""  # Family.operation: what it computes, shared with the families it is ranked beside
    # (problem field or a name of ``lets``, constexpr of its tile): the efficiency dims
    tiled: tuple[tuple[str, str], ...] = ()
    accepts: Callable[[Any, Any], str | None] = lambda spec, problem: None
    work: Callable[[Any, Any, Target], TileWork] | None = None
    # (spec, problem, Target, banks) -> KernelCounts for the hardware time model; None: ranked by efficiency
    counts: Callable[..., Any] | None = None
    sources: tuple[str, ...] = ()  # modules whose files the key hashes (default: ``module``)
    arch_rule: Callable[[Target, Any], str | None] = lambda target, lane: None
    extra_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def constexprs(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.kind == "constexpr")


# ---------------------------------------------------------------- sources and key material


def module_file(module: str) -> Path:
    """The file of ``module`` found from its top-level package's location, importing nothing."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise SpecError(f"Triton kernel module {module}: no package {top} on this interpreter's path")
    roots = list(spec.submodule_search_locations or [os.path.dirname(spec.origin or "")])
    for root in roots:
        base = Path(root, *rest)
        for cand in (base.with_suffix(".py"), base / "__init__.py") if rest else (Path(spec.origin or ""),):
            if cand.is_file():
                return cand
    raise SpecError(f"Triton kernel module {module}: no file under {roots}")


def sys_path_for(module: str) -> str:
    """The directory to put first on a worker's sys.path so that ``import module`` finds it."""
    f = module_file(module)
    depth = len(module.split("."))
    return str(f.parents[depth] if f.name == "__init__.py" else f.parents[depth - 1])


@functools.cache
def _hash_file(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_digests(kernel: TritonKernel) -> dict[str, str]:
    """{file: sha256} of the kernel's module and its declared sources (what the worker checks)."""
    out = {}
    for mod in dict.fromkeys((kernel.module, *kernel.sources)):
        f = module_file(mod)
        st = f.stat()
        out[str(f)] = _hash_file(str(f), st.st_mtime_ns, st.st_size)
    return out


# ---------------------------------------------------------------- the spec type


class TritonSpecBase:
    """Base of every generated Triton spec type (a frozen dataclass per family)."""

    KERNEL: TritonKernel  # set on the generated class
    compile_input = TRITON_COMPILE_INPUT
    if TYPE_CHECKING:  # what every generated dataclass declares (_spec_type) and is read here
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
        num_warps: int
        num_stages: int

    @classmethod
    def key_material(cls) -> dict[str, Any]:
        """What the plan key adds for this family: the kernel's function and its sources' hashes."""
        k = cls.KERNEL
        digests = source_digests(k)
        return {"module": k.module, "function": k.function,
                "sources": {Path(f).name: d for f, d in sorted(digests.items())}}

    def to_dict(self) -> dict[str, Any]:
        return dict(sorted(dataclasses.asdict(self).items()))

    @classmethod
    def from_dict(cls, d: object) -> Any:
        known = check_known(cls, d, f"{cls.KERNEL.family} spec")
        try:
            return cls(**known)
        except TypeError as e:
            raise SpecError(f"{cls.KERNEL.family} spec: {e}") from None

    @property
    def kernel_name(self) -> str:
        return self.KERNEL.function

    @property
    def config(self) -> dict[str, int]:
        return {n: getattr(self, n) for n in self.KERNEL.constexprs}

    def warp_size(self, target: Target) -> int:
        return target.info.wave_size if target.is_amdgpu else 32

    def geometry(self, target: Target) -> Any:
        threads = self.num_warps * self.warp_size(target)
        if threads > target.info.max_block:
            raise SpecError(f"{self.KERNEL.family}: {self.num_warps} warps of {self.warp_size(target)} exceed "
                            f"{target.info.max_block} threads on {target.processor}")
        return _Geometry(threads)

    def dtype_of(self, p: TritonParam) -> str:
        return getattr(self, p.dtype[1:]) if p.dtype.startswith("$") else p.dtype

    def representative(self) -> dict[str, int]:
        """A problem of the spec's classes (the fields it classes; the others at 4096)."""
        return {f: _REPRESENTATIVE[getattr(self, f"{f}_class")] if f in self.KERNEL.classes else 4096
                for f in self.KERNEL.problem}

    def specialization(self, values: Mapping[str, int]) -> tuple[str, ...]:
        """What Triton's binder makes of each parameter for these problem values (pointers: as
        the runner's and torch's allocations are, 16-byte aligned and, on AMD, within 2 GiB)."""
        env = self._env(values)
        out = []
        for p in self.KERNEL.params:
            if p.kind == "constexpr":
                out.append("constexpr")
            elif p.kind == "pointer":
                out.append("*" + TRITON_DTYPES[self.dtype_of(p)] + ":D")
            else:
                v = evaluate(p.expr, env)
                ty = "i32" if I32[0] <= v <= I32[1] else "i64"
                if not p.specialize:
                    out.append(ty)
                else:
                    out.append("one" if v == 1 else f"{ty}:D" if v % 16 == 0 else ty)
        return tuple(out)

    def _env(self, values: Mapping[str, int]) -> dict[str, int]:
        env = dict(values)
        env.update(self.config)
        return env

    def request_args(self, target: Target) -> list[dict[str, Any]]:
        env = self._env(self.representative())
        out = []
        for p in self.KERNEL.params:
            if p.kind == "constexpr":
                out.append({"name": p.name, "kind": "constexpr", "value": getattr(self, p.name)})
            elif p.kind == "pointer":
                out.append({"name": p.name, "kind": "pointer", "dtype": TRITON_DTYPES[self.dtype_of(p)], "align": 16,
                            "range32": True})
            else:
                out.append({"name": p.name, "kind": "int", "value": evaluate(p.expr, env)})
        return out

    def options(self) -> dict[str, int]:
        # Config.all_kwargs() of Triton's autotuner: num_warps, num_ctas, num_stages (maxnreg unset)
        return {"num_warps": self.num_warps, "num_ctas": 1, "num_stages": self.num_stages,
                **dict(self.KERNEL.extra_kwargs)}

    def launch_formulas(self) -> LaunchFormulas:
        k = self.KERNEL
        consts = self.config
        rep = self.representative()
        env = self._env(rep)
        args = []
        for p in k.params:
            if p.kind == "constexpr":
                continue
            if p.kind == "int":
                if p.specialize and evaluate(p.expr, env) == 1:
                    continue  # == 1: Triton made it a constexpr; it is not a kernel parameter
                ty = "i32" if I32[0] <= evaluate(p.expr, env) <= I32[1] else "i64"
                args.append(ArgDef(p.label or p.name, "scalar", ty, _subst(p.expr, consts)))
            else:
                args.append(ArgDef(p.label or p.name, "global_pointer", self.dtype_of(p), _subst(p.expr, consts),
                                   p.access))
        for name in SCRATCH:
            args.append(ArgDef(name, "global_pointer", "f32", "0", "read_write"))
        grid = tuple(_subst(g, consts) for g in k.grid)
        if len(grid) != 3:
            raise SpecError(f"{k.family}: a grid is three formulas (x, y, z), got {k.grid!r}")
        return LaunchFormulas(problem=k.problem, lets=tuple((n, _subst(t, consts)) for n, t in k.lets),
                              grid=(grid[0], grid[1], grid[2]), args=tuple(args))


@dataclass(frozen=True)
class _Geometry:
    threads: int


def _subst(text: str, consts: Mapping[str, int]) -> str:
    """A formula with the config's constexpr names replaced by their values."""
    from rocke_aot.launch import tokens

    out = []
    for kind, tok in tokens(text):
        out.append(str(consts[tok]) if kind == "name" and tok in consts else tok)
    return " ".join(out)


def _spec_type(kernel: TritonKernel) -> type[Any]:
    fields_: list[Any] = []
    for b in sorted({n for d in kernel.baked for n in d}):
        fields_.append((b, "str"))
    for p in kernel.params:
        if p.kind == "constexpr":
            fields_.append((p.name, "int") if p.default is None else (p.name, "int", field(default=p.default)))
    fields_ += [("num_warps", "int"), ("num_stages", "int")]
    fields_ += [(f"{f}_class", "str") for f in kernel.classes]

    def post_init(self) -> None:
        check_types(self, kernel.family)
        for f in kernel.classes:
            v = getattr(self, f"{f}_class")
            if v not in kernel.classes[f]:
                raise SpecError(f"{kernel.family} spec {f}_class={v!r} not in {kernel.classes[f]}")
        for b in {n for d in kernel.baked for n in d}:
            if getattr(self, b) not in DTYPE_BYTES:
                raise SpecError(f"{kernel.family} spec {b}={getattr(self, b)!r} not a dtype {tuple(DTYPE_BYTES)}")
        if self.num_warps not in (1, 2, 4, 8, 16) or not 1 <= self.num_stages <= 8:
            raise SpecError(f"{kernel.family} spec num_warps={self.num_warps} / num_stages={self.num_stages} out of range")

    name = "TritonSpec_" + kernel.family
    # keyword-only: a constexpr with a default may precede the required fields (every spec is built by name)
    cls = dataclasses.make_dataclass(name, fields_, bases=(TritonSpecBase,), frozen=True, kw_only=True,
                                     namespace={"__post_init__": post_init, "KERNEL": kernel,
                                                "__module__": __name__})
    return cls


# ---------------------------------------------------------------- table and model


def _table(kernel: TritonKernel, spec_type: type[Any]) -> FamilyTable:
    def knobs(baked, target, lane):
        # the config list is a list, not a product: one knob whose values are whole configs
        grid = {"config": tuple(tuple(sorted(c.items())) for c in kernel.configs(target))}
        grid.update({f"{f}_class": tuple(v) for f, v in kernel.classes.items()})
        return grid

    def make_spec(baked, knobs):
        knobs = dict(knobs)
        knobs.pop("path", None)
        return spec_type(**baked, **dict(knobs.pop("config")), **knobs)

    return FamilyTable(
        family=kernel.family, lane_decisions=dict(kernel.lanes), baked=lambda target, lane: kernel.baked,
        knobs=knobs, make_spec=make_spec, check=lambda spec, target: spec.geometry(target),
        spec_from_dict=spec_type.from_dict, arch_rule=_arch_rule(kernel), paths=lambda target, lane: ("fma",),
        own_targets=True)


def _arch_rule(kernel: TritonKernel):
    def rule(target: Target, lane) -> str | None:
        if target.features:
            return (f"Triton compiles {target.processor} without target features; the code object's "
                    f"xnack/sramecc are Triton's choice: ask for {target.processor}")
        return kernel.arch_rule(target, lane)
    return rule


def _model(kernel: TritonKernel) -> Model:
    def accepts(spec: Any, problem: Any) -> str | None:
        values = {f: getattr(problem, f) for f in kernel.problem}
        for b in {n for d in kernel.baked for n in d}:
            want = getattr(problem, b, None)
            if want is not None and want != getattr(spec, b):
                return f"{kernel.family} spec is {b}={getattr(spec, b)}, the problem {want}"
        mine = spec.specialization(spec.representative())
        got = spec.specialization(values)
        for p, a, b in zip(kernel.params, mine, got):
            if a != b:
                return (f"argument {p.name} specializes as {b} for this problem; the spec was built for {a} "
                        f"({', '.join(f'{f}={values[f]}' for f in kernel.classes)})")
        for p in kernel.params:
            if p.kind == "pointer":
                n = evaluate(p.expr, bind(kernel.problem, (), values)) * POINTEE_BYTES[spec.dtype_of(p)]
                if n > 2**31 - 1:
                    return f"{p.name} holds {n} bytes, over the 2 GiB the spec was specialized for"
        return kernel.accepts(spec, problem)

    def efficiency(spec: Any, problem: Any, info: ArchInfo) -> Efficiency:
        env = spec.launch_formulas().env(problem)  # the problem's fields and the config's lets
        dims = [dim(f, env[f] if f in env else getattr(problem, f), getattr(spec, c)) for f, c in kernel.tiled]
        tiles = env["tiles"]
        return combine(dims, tiles, info)

    def work(spec: Any, problem: Any, target: Target) -> TileWork:
        if kernel.work is None:
            raise SpecError(f"{kernel.family} has no work model")
        return kernel.work(spec, problem, target)

    counts = None
    kernel_counts = kernel.counts
    if kernel_counts is not None:
        def counts(spec: Any, problem: Any, target: Target, banks: int = 32) -> Any:
            return kernel_counts(spec, problem, target, banks)

    return Model(accepts, efficiency, work, counts)


def triton_family(kernel: TritonKernel) -> families.Family:
    """The Family of a Triton kernel, not registered: what a ``rocke_aot.families`` entry point gives
    (docs/triton-plugins.md). The registry installs it like any plugin's family; its lowerer is
    the Triton kind's (aot/families/triton.py), attached by kind: no lowerer entry point."""
    if not isinstance(kernel, TritonKernel):
        raise SpecError(f"triton_family() takes a TritonKernel, got {type(kernel).__name__}")
    ref = kernel.reference
    if not isinstance(ref, (str, families.Reference)):
        raise SpecError(f"TritonKernel {kernel.family}: reference must be a family's name or a "
                        f"rocke_aot.variants.families.Reference, got {type(ref).__name__}")
    spec_type = _spec_type(kernel)
    return families.Family(kernel.family, spec_type, kernel.problem_type, _table(kernel, spec_type), _model(kernel),
                           kernel.description or f"Triton kernel {kernel.module}:{kernel.function}",
                           reference=ref if isinstance(ref, families.Reference) else None,
                           operation=kernel.operation)


def register_triton(kernel: TritonKernel) -> families.Family:
    """Register a Triton kernel as a family in this process (variants/families.py's registry, like
    every family): the in-repo kernels and scripts; a package declares ``triton_family(kernel)``
    through its entry point instead."""
    return families.register(triton_family(kernel))


def is_triton(family: object) -> bool:
    spec_type = getattr(family, "spec_type", None)
    return isinstance(spec_type, type) and issubclass(spec_type, TritonSpecBase)


__all__ = ["CLASSES", "SCRATCH", "TritonKernel", "TritonParam", "TritonSpecBase", "is_triton", "register_triton",
           "source_digests", "sys_path_for", "triton_family"]
