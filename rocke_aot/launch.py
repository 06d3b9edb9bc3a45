"""The launch contract: how to launch a kernel, as data a runner evaluates (no per-family code).

    family definition (variants: spec.launch_formulas())
        LaunchFormulas(problem=("m", "n", "k"),            the integer problem fields it reads
                       lets=(("tiles", "ceil_div(m, 64) * ceil_div(n, 64)"),),
                       grid=("tiles", "1", "1"),
                       args=(ArgDef("A", "global_pointer", "f16", "m * k", "read_only"), ...,
                             ArgDef("M", "scalar", "i32", "m"), ...))
            + block (threads, from the spec's geometry on a target)
            + the kernarg layout (offset, size, alignment of every argument: the code
              object's own metadata, checked against the lowering's layout)
        = LaunchContract  (frozen; as_dict() is metadata["launch"] of an artifact)
    runner
        contract.plan({"m": 1000, "n": 7, "k": 64}) -> LaunchPlan(grid=(x, y, z), block=(x, y, z),
                                                     args=(BoundArg(..., value), ...))
            scalars: value = the formula's result (checked to fit the scalar type)
            pointers: value = elements the buffer holds, nbytes = value * dtype size, so a
                      runner can refuse or chunk a tensor over max_tensor_bytes
        contract.split_units(problem) -> ("m", 100000, {"A": 128, "C": 256})
            the axis a runner may split a too-large launch along (Split: the problem field,
            and per pointer argument the elements one unit of it spans); each chunk is the
            same contract on the problem with that field = the chunk's count, the listed
            pointers advanced by start * bytes per unit (runner/chunk.py plans the chunks)

One argument model from lowering to launch, three stages of one thing:

    ArgDef      the family defines it (name, kind, dtype, count/value formula, access); the
                lowering makes it a kernel parameter (aot/lower/module.py define_kernel)
    KernelArg   laid out: + offset, size, align, by natural_layout, the only layout rule (the
                lowering's kernargs and the contract's args are the same KernelArgs; the builder
                replaces offsets with the code object's own, checked equal: aot/codeobject.py)
    BoundArg    bound to one problem: + the value passed (scalars) or elements held (pointers)
The runner packs BoundArgs into bytes (runner/run.py pack -> PackedArgs).

Pointer access (ArgDef.access, ACCESSES): "read_only" (an input the runner fills and the
reference reads), "write_only" / "read_write" (the output, or a kernel's own in-out buffer),
"workspace": scratch the kernel needs between its work-groups (the split-K gemm's partial
tiles and arrival counters). The rule a workspace kernel keeps and a runner relies on: the
runner allocates the buffer zero-filled, once per problem, sized for the whole problem, and
passes it unchanged to every launch (every chunk of a split launch too: it is never advanced,
and a chunk's smaller problem needs no more of it); the kernel leaves every word it reads
before writing (the counters) as it found it, zero, and writes every other word it reads (the
partials) in the same launch before reading it. So one zero fill serves any number of
launches in stream order, and a workspace is never an input of the reference nor checked.

Formulas are integer expressions over named integers: literals, names, ``+ - * // %``,
unary minus, parentheses and the functions ``ceil_div(a, b)``, ``min(a, ...)``,
``max(a, ...)``. They are parsed by the small recursive-descent parser below, never by
``eval()``; a name that is neither a problem field nor an earlier ``let`` is a SpecError
naming it, found when the contract is built, not when it is first launched.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, cast

from rocke_aot.boundedjson import is_int
from rocke_aot.dtypes import MAX_TENSOR_BYTES, POINTEE_BYTES
from rocke_aot.errors import SpecError

KINDS = ("global_pointer", "scalar")
ACCESSES = ("read_only", "write_only", "read_write", "workspace")  # pointers (module doc)
# Scalar kernel-argument types: bytes and the range of values they carry.
SCALAR_TYPES: Mapping[str, tuple[int, int, int]] = {"i32": (4, -2**31, 2**31 - 1),
                                                    "u32": (4, 0, 2**32 - 1),
                                                    "i64": (8, -2**63, 2**63 - 1)}
POINTER_BYTES = 8  # a global (addrspace 1) pointer on amdgcn and nvptx64
FUNCTIONS = ("ceil_div", "min", "max")


class FormulaError(SpecError):
    """A formula that does not parse, names an unknown integer, or divides by zero."""


# -- formulas ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(//|[-+*%(),]))")


def tokens(text: str) -> list[tuple[str, str]]:
    """A formula's tokens in order: ("num" | "name" | "op", text); FormulaError on anything else."""
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FormulaError(f"formula {text!r}: unexpected character at {pos}: {text[pos:pos + 8]!r}")
        num, name, op = m.groups()
        out.append(("num", num) if num else ("name", name) if name else ("op", op))
        pos = m.end()
    return out


class _Parser:
    # expr := term (('+'|'-') term)* ; term := unary (('*'|'//'|'%') unary)*
    # unary := '-' unary | atom ; atom := num | name | func '(' expr (',' expr)* ')' | '(' expr ')'
    def __init__(self, text: str):
        self.text, self.toks, self.i = text, tokens(text), 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, op: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (op is not None and tok != ("op", op)):
            raise FormulaError(f"formula {self.text!r}: expected {op or 'a value'}, got "
                               f"{tok[1] if tok else 'the end'}")
        self.i += 1
        return tok

    def parse(self) -> tuple:
        node = self.expr()
        if (tok := self.peek()) is not None:
            raise FormulaError(f"formula {self.text!r}: unexpected {tok[1]!r}")
        return node

    def expr(self) -> tuple:
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            node = (self.take()[1], node, self.term())
        return node

    def term(self) -> tuple:
        node = self.unary()
        while self.peek() in (("op", "*"), ("op", "//"), ("op", "%")):
            node = (self.take()[1], node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.peek() == ("op", "-"):
            self.take()
            return ("neg", self.unary())
        return self.atom()

    def atom(self) -> tuple:
        kind, val = self.take()
        if kind == "num":
            return ("num", int(val))
        if kind == "name":
            if self.peek() == ("op", "("):
                if val not in FUNCTIONS:
                    raise FormulaError(f"formula {self.text!r}: unknown function {val!r} "
                                       f"(functions: {', '.join(FUNCTIONS)})")
                self.take("(")
                args = [self.expr()]
                while self.peek() == ("op", ","):
                    self.take(",")
                    args.append(self.expr())
                self.take(")")
                if val == "ceil_div" and len(args) != 2:
                    raise FormulaError(f"formula {self.text!r}: ceil_div takes 2 arguments, got {len(args)}")
                return ("call", val, tuple(args))
            return ("name", val)
        if val == "(":
            node = self.expr()
            self.take(")")
            return node
        raise FormulaError(f"formula {self.text!r}: unexpected {val!r}")


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> tuple:
    """The syntax tree of a formula (nested tuples); FormulaError when it does not parse."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError(f"a formula must be a non-empty string, got {text!r}")
    return _Parser(text).parse()


@functools.lru_cache(maxsize=4096)
def names(text: str) -> frozenset[str]:
    """Every name a formula reads."""
    out: set[str] = set()

    def walk(node: tuple) -> None:
        if node[0] == "name":
            out.add(node[1])
        elif node[0] == "call":
            for a in node[2]:
                walk(a)
        elif node[0] != "num":
            for a in node[1:]:
                walk(a)

    walk(parse(text))
    return frozenset(out)


def ceil_div(a: int, b: int) -> int:
    """The smallest integer >= a / b (b > 0): the formulas' ``ceil_div``, and every count's and
    model's tile arithmetic (one definition)."""
    return -(-a // b)


def _div(text: str, a: int, b: int) -> int:
    if b == 0:
        raise FormulaError(f"formula {text!r}: division by zero")
    return a // b


def evaluate(text: str, env: Mapping[str, int]) -> int:
    """The value of formula ``text`` with its names bound by ``env`` (Python integer semantics:
    ``//`` floors, ``ceil_div(a, b)`` = -(-a // b))."""

    def ev(node: tuple) -> int:
        op = node[0]
        if op == "num":
            return node[1]
        if op == "name":
            try:
                return env[node[1]]
            except KeyError:
                raise FormulaError(f"formula {text!r}: unknown name {node[1]!r} "
                                   f"(known: {', '.join(sorted(env)) or 'none'})") from None
        if op == "neg":
            return -ev(node[1])
        if op == "call":
            args = [ev(a) for a in node[2]]
            if node[1] == "ceil_div":
                return -_div(text, -args[0], args[1])
            return min(args) if node[1] == "min" else max(args)
        a, b = ev(node[1]), ev(node[2])
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "//":
            return _div(text, a, b)
        if b == 0:
            raise FormulaError(f"formula {text!r}: modulo by zero")
        return a % b

    return ev(parse(text))


# -- what a family defines ----------------------------------------------------------------------

@dataclass(frozen=True)
class ArgDef:
    """One kernel argument as the family defines it (layout comes from the code object)."""

    name: str
    kind: str  # "global_pointer" | "scalar"
    dtype: str  # pointers: element dtype ("f16"); scalars: the scalar type ("i32")
    expr: str  # scalars: the value; pointers: how many elements the buffer holds
    access: str | None = None  # pointers: one of ACCESSES (module doc); scalars: None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"argument {self.name}: kind {self.kind!r} not in {KINDS}")
        if self.access is not None and (self.kind != "global_pointer" or self.access not in ACCESSES):
            raise SpecError(f"argument {self.name}: access {self.access!r} is for pointers, one of {ACCESSES}")
        known = POINTEE_BYTES if self.kind == "global_pointer" else SCALAR_TYPES
        if self.dtype not in known:
            raise SpecError(f"argument {self.name}: {self.kind} dtype {self.dtype!r} not in {tuple(known)}")
        parse(self.expr)

    @property
    def natural_size(self) -> int:
        return POINTER_BYTES if self.kind == "global_pointer" else SCALAR_TYPES[self.dtype][0]


@dataclass(frozen=True)
class Split:
    """The axis a launch can be cut along: ``field`` (a problem field) and, for every pointer
    argument that grows with it, the elements one unit spans (a formula; other pointers,
    e.g. weights, are shared by every chunk)."""

    field: str
    strides: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "strides": [[a, t] for a, t in self.strides]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Split | None:
        return None if d is None else cls(d["field"], tuple((a, t) for a, t in d["strides"]))


def _check_split(split: Split | None, problem: tuple[str, ...], args) -> None:
    if split is None:
        return
    if split.field not in problem:
        raise FormulaError(f"split field {split.field!r} is not a problem field ({', '.join(problem)})")
    pointers = {a.name for a in args if a.kind == "global_pointer"}
    for name, _ in split.strides:
        if name not in pointers:
            raise SpecError(f"split stride for {name!r}, which is not a pointer argument ({', '.join(sorted(pointers))})")


@dataclass(frozen=True)
class LaunchFormulas:
    """The target-independent half of a launch: a family's ``launch_formulas(spec)``.

    ``lets`` are named integers evaluated in order (each may read the problem fields and
    earlier lets); ``tiles`` must be one of them: the work-groups that compute output tiles
    (what the efficiency model counts; the grid may add others, e.g. border zeroing).
    """

    problem: tuple[str, ...]
    lets: tuple[tuple[str, str], ...]
    grid: tuple[str, str, str]
    args: tuple[ArgDef, ...]
    split: Split | None = None

    def __post_init__(self) -> None:
        check_names(self.problem, self.lets, self.grid, self.args, split=self.split)
        _check_split(self.split, self.problem, self.args)
        if "tiles" not in dict(self.lets):
            raise SpecError("launch formulas need a let named 'tiles' (the tile work-groups)")

    def env(self, problem: object) -> dict[str, int]:
        return bind(self.problem, self.lets, problem)

    def tiles(self, problem: object) -> int:
        return self.env(problem)["tiles"]

    def grid_of(self, problem: object) -> tuple[int, int, int]:
        env = self.env(problem)
        return tuple(evaluate(g, env) for g in self.grid)  # type: ignore[return-value]


def check_names(problem: tuple[str, ...], lets, grid, args, block=("1", "1", "1"), split=None) -> None:
    """Every formula reads only problem fields and earlier lets (FormulaError naming the rest)."""
    known = set(problem)
    for name, text in lets:
        _known(text, known, f"let {name}")
        known.add(name)
    for axis, text in zip("xyz", grid):
        _known(text, known, f"grid.{axis}")
    for axis, text in zip("xyz", block):
        _known(text, known, f"block.{axis}")
    for a in args:
        _known(a.expr, known, f"argument {a.name}")
    for name, text in (split.strides if split is not None else ()):
        _known(text, known, f"split stride of {name}")


def _known(text: str, known: set[str], where: str) -> None:
    unknown = sorted(names(text) - known)
    if unknown:
        raise FormulaError(f"{where}: formula {text!r} reads unknown name(s) {', '.join(unknown)} "
                           f"(known: {', '.join(sorted(known))})")


def problem_fields(problem: object) -> dict[str, int]:
    """The integer fields of a problem (a frozen dataclass or a mapping): the formulas' inputs."""
    if is_dataclass(problem) and not isinstance(problem, type):
        items = {f.name: getattr(problem, f.name) for f in fields(problem)}
    elif isinstance(problem, Mapping):
        items = dict(problem)
    else:
        raise SpecError(f"a problem must be a dataclass or a mapping, got {type(problem).__name__}")
    return {k: v for k, v in items.items() if type(v) is int}


def bind(problem_names: tuple[str, ...], lets, problem: object) -> dict[str, int]:
    given = problem_fields(problem)
    missing = [n for n in problem_names if n not in given]
    if missing:
        raise SpecError(f"problem lacks integer field(s) {', '.join(missing)} "
                        f"(the launch reads {', '.join(problem_names)})")
    env = {n: given[n] for n in problem_names}
    for name, text in lets:
        env[name] = evaluate(text, env)
    return env


# -- the contract an artifact carries ----------------------------------------------------------

@dataclass(frozen=True)
class KernelArg:
    """One kernel argument, laid out: the family's definition plus offset/size/alignment."""

    name: str
    kind: str
    dtype: str
    expr: str
    offset: int
    size: int
    align: int
    access: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "expr": self.expr,
                "offset": self.offset, "size": self.size, "align": self.align, "access": self.access}


def natural_layout(args: tuple[ArgDef, ...]) -> tuple[KernelArg, ...]:
    """Each argument at the next offset aligned to its size (what amdgcn and nvptx64 do for
    pointers and 4/8-byte scalars); the builder checks it against the code object."""
    out, offset = [], 0
    for a in args:
        size = a.natural_size
        offset = -(-offset // size) * size
        out.append(KernelArg(a.name, a.kind, a.dtype, a.expr, offset, size, size, a.access))
        offset += size
    return tuple(out)


@dataclass(frozen=True)
class BoundArg:
    name: str
    kind: str
    dtype: str
    offset: int
    size: int
    value: int  # scalars: the value passed; pointers: elements the buffer must hold
    nbytes: int  # scalars: size; pointers: value * element size

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "offset": self.offset,
                "size": self.size, "value": self.value, "nbytes": self.nbytes}


@dataclass(frozen=True)
class LaunchPlan:
    """One launch, evaluated: grid and block sizes and every argument in kernarg order."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[BoundArg, ...]
    kernarg_size: int
    max_tensor_bytes: int

    @property
    def over_limit(self) -> tuple[str, ...]:
        """Buffers larger than max_tensor_bytes (a runner refuses or chunks these)."""
        return tuple(a.name for a in self.args if a.kind == "global_pointer" and a.nbytes > self.max_tensor_bytes)

    @property
    def empty(self) -> bool:
        return 0 in self.grid


@dataclass(frozen=True)
class LaunchContract:
    kernel: str
    problem: tuple[str, ...]
    lets: tuple[tuple[str, str], ...]
    grid: tuple[str, str, str]
    block: tuple[str, str, str]
    args: tuple[KernelArg, ...]
    kernarg_size: int
    max_tensor_bytes: int = MAX_TENSOR_BYTES
    dynamic_shared_bytes: int = 0  # shared memory the launch provides (Triton kernels, the sm_90 async gemm)
    split: Split | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kernel, str) or not self.kernel:
            raise SpecError(f"a launch contract names its kernel, got {self.kernel!r}")
        for what, dims in (("grid", self.grid), ("block", self.block)):
            if len(dims) != 3 or not all(isinstance(d, str) for d in dims):
                raise SpecError(f"a launch contract's {what} is three formulas (x, y, z), got {dims!r}")
        for what in ("kernarg_size", "max_tensor_bytes", "dynamic_shared_bytes"):
            v = getattr(self, what)
            if not is_int(v) or v < 0:
                raise SpecError(f"a launch contract's {what} is a non-negative int, got {v!r}")
        check_names(self.problem, self.lets, self.grid, self.args, self.block, self.split)
        _check_split(self.split, self.problem, self.args)
        end = 0
        for a in self.args:
            if a.offset % a.align or a.offset < end:
                raise SpecError(f"argument {a.name}: offset {a.offset} overlaps or is not {a.align}-aligned")
            end = a.offset + a.size
        if end > self.kernarg_size:
            raise SpecError(f"arguments end at {end}, past the kernarg size {self.kernarg_size}")

    @classmethod
    def build(cls, kernel: str, formulas: LaunchFormulas, block: tuple[int, int, int] | tuple[str, str, str],
              args: tuple[KernelArg, ...] | None = None, kernarg_size: int | None = None,
              max_tensor_bytes: int = MAX_TENSOR_BYTES, dynamic_shared_bytes: int = 0) -> LaunchContract:
        """A contract from a family's formulas, a block size and a layout (natural when None)."""
        laid = natural_layout(formulas.args) if args is None else tuple(args)
        if [(a.name, a.kind) for a in laid] != [(a.name, a.kind) for a in formulas.args]:
            raise SpecError(f"{kernel}: layout {[a.name for a in laid]} does not match the family's "
                            f"arguments {[a.name for a in formulas.args]}")
        size = kernarg_size if kernarg_size is not None else (laid[-1].offset + laid[-1].size if laid else 0)
        # __post_init__ checks the block is three formulas; the cast only names the type it checks
        blk = cast("tuple[str, str, str]", tuple(str(b) for b in block))
        return cls(kernel, formulas.problem, formulas.lets, formulas.grid, blk,
                   laid, size, max_tensor_bytes, dynamic_shared_bytes, split=formulas.split)

    def plan(self, problem: object) -> LaunchPlan:
        env = bind(self.problem, self.lets, problem)
        grid = tuple(evaluate(g, env) for g in self.grid)
        block = tuple(evaluate(b, env) for b in self.block)
        if any(g < 0 for g in grid) or any(b < 1 for b in block):
            raise SpecError(f"{self.kernel}: grid {grid} / block {block} out of range for {env}")
        bound = []
        for a in self.args:
            v = evaluate(a.expr, env)
            if a.kind == "scalar":
                _, lo, hi = SCALAR_TYPES[a.dtype]
                if not lo <= v <= hi:
                    raise SpecError(f"{self.kernel}: argument {a.name} = {v} does not fit {a.dtype}")
                bound.append(BoundArg(a.name, a.kind, a.dtype, a.offset, a.size, v, a.size))
            else:
                bound.append(BoundArg(a.name, a.kind, a.dtype, a.offset, a.size, v, v * POINTEE_BYTES[a.dtype]))
        return LaunchPlan(grid, block, tuple(bound), self.kernarg_size, self.max_tensor_bytes)  # type: ignore[arg-type]

    def split_units(self, problem: object) -> tuple[str, int, dict[str, int]]:
        """(split field, its extent, bytes one unit spans per split pointer) for chunking."""
        if self.split is None:
            raise SpecError(f"{self.kernel}: the launch has no split axis; it cannot be chunked")
        env = bind(self.problem, self.lets, problem)
        dtypes = {a.name: a.dtype for a in self.args}
        units = {name: evaluate(text, env) * POINTEE_BYTES[dtypes[name]] for name, text in self.split.strides}
        return self.split.field, env[self.split.field], units

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "problem": list(self.problem),
                "lets": [[n, t] for n, t in self.lets], "grid": list(self.grid), "block": list(self.block),
                "args": [a.as_dict() for a in self.args], "kernarg_size": self.kernarg_size,
                "max_tensor_bytes": self.max_tensor_bytes, "dynamic_shared_bytes": self.dynamic_shared_bytes,
                "split": self.split.as_dict() if self.split is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LaunchContract:
        """The contract stored in an artifact's metadata["launch"] (checked like a new one)."""
        try:
            return cls(kernel=d["kernel"], problem=tuple(d["problem"]),
                       lets=tuple((n, t) for n, t in d["lets"]), grid=tuple(d["grid"]),
                       block=tuple(d["block"]), args=tuple(KernelArg(**a) for a in d["args"]),
                       kernarg_size=d["kernarg_size"], max_tensor_bytes=d["max_tensor_bytes"],
                       dynamic_shared_bytes=d.get("dynamic_shared_bytes", 0),
                       split=Split.from_dict(d.get("split")))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, SpecError):
                raise
            raise SpecError(f"malformed launch contract: {e}") from None


__all__ = ["ACCESSES", "ArgDef", "BoundArg", "FormulaError", "KernelArg", "LaunchContract", "LaunchFormulas",
           "LaunchPlan", "Split", "evaluate", "names", "natural_layout", "parse", "problem_fields", "FUNCTIONS",
           "KINDS", "MAX_TENSOR_BYTES", "POINTER_BYTES", "SCALAR_TYPES"]
