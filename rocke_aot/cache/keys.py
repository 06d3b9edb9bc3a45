"""Cache keys: the plan key (what the builder asks for) and the code-object key (what the
compiler consumed), each hashed canonically.

    plan key (the ``artifacts`` table's key: the plan index, what select and the service name)
    KeyInputs(arch, lane, profile, family, spec, recipe_digest, toolchain, options)
        │  __post_init__: validate + canonicalize (arch -> canonical target ID,
        │                 lane/profile checked against the one lane registry,
        │                 spec/toolchain/options -> canonical JSON)
        ▼
    encode(inputs) = b"rocke-aot/artifact-key/v2\\n" + canonical_json({...all eight fields...})
        ▼
    artifact_key(inputs) = sha256(encode(inputs)).hexdigest()

    code-object key (the ``code_objects`` table: compiled once per equal compiler input)
    code_object_key(arch, profile, ir_sha256, toolchain_json, options_json)
        = sha256(b"rocke-aot/code-object-key/v1\\n" + canonical_json({arch, ir_sha256, options,
                                            profile, toolchain: target_identity(toolchain, arch)}))

The toolchain identity in both keys is the one for the target's code format (targets.py
FORMAT_TOOLS: an HSACO's holds the linker, a cubin's ptxas; Toolchain.identity(target) builds
it so). The code-object key applies the same rule to whatever identity it is given, so an
identity written before the rule (an old store's row, an old bundle) keys its code object
where today's builder looks for it (migration 0009_target_identity rewrote the stored ones).

The plan key needs no lowering (a no-op build is hashing plus one bulk lookup); its recipe
digest may be coarse, because the precision lives in the code-object key: after a change that
moves the digest but not the IR (a comment, the ranking) every plan misses, is lowered again
(cheap) and finds its code object, so nothing is compiled. The lane is not part of the
code-object key: the emission profile and the toolchain identity are what the compiler sees.

Canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"))`` over a value
that was checked first: string keys only (``json`` would silently turn ``1`` into
``"1"``, making two different specs collide), no NaN/infinity, no sets or bytes or
arbitrary objects (their text form is not stable). Field order therefore never
matters, while every value does: ``1`` and ``"1"`` and ``1.0`` and ``True`` are four
different keys. The encoding carries a version (``KEY_VERSION``) so a future change of
the encoding can never collide with keys made by this one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping  # typing.Mapping's isinstance is several times slower
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rocke_aot.errors import LaneError, SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target, target_identity

# v2: lowering_digest became recipe_digest (every module on the lowering/compile path, by
# rule: aot/recipe.py) and the compile options became a field of their own.
KEY_VERSION = 2
_PREFIX = f"rocke-aot/artifact-key/v{KEY_VERSION}\n".encode()
_FAMILY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


def _check_json(value: Any, where: str) -> Any:
    """Return a plain-JSON copy of ``value`` (tuples -> lists), refusing anything ambiguous."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)  # int subclasses (IntEnum) would otherwise print their own way
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(f"{where}: {value!r} has no canonical JSON form")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(f"{where}: keys must be strings, got {type(k).__name__} {k!r}")
            out[k] = _check_json(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_check_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise SpecError(f"{where}: {type(value).__name__} {value!r} is not a JSON value")


def canonical_json(obj: Any) -> str:
    """The one text form of a JSON value: sorted keys, no whitespace, checked types."""
    return _dumps(_check_json(obj, "value"))


def _dumps(checked: Any) -> str:
    return json.dumps(checked, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def freeze(value: Any) -> Any:
    """Read-only mappings and tuples (a frozen spec, toolchain, metadata) from parsed JSON; ``thaw`` undoes it."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


_SCALARS = (str, int, float, bool, type(None))


def thaw(value: Any) -> Any:
    """Plain dicts/lists again (for JSON output) from a frozen spec or toolchain."""
    if type(value) in _SCALARS:  # the common case, without the ABC check
        return value
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class KeyInputs:
    """Everything that changes a code object's bytes. Validated and canonicalized on creation."""

    arch: str  # canonical target ID ("gfx942:sramecc+:xnack-"); a permuted ID is canonicalized
    lane: str  # a registered lane name
    profile: str  # must be the lane's profile
    family: str  # kernel generator name
    spec: Mapping[str, Any]  # the family's parameters and knobs (frozen after validation)
    recipe_digest: str  # aot/recipe.py: sha256 of every module on the lowering/compile path
    toolchain: Mapping[str, str]  # toolchain identity: kind, versions, sha256 of its library and tools
    options: Mapping[str, Any]  # compile options (aot/compiler/options.py), as the compile reads them
    _spec_json: str = field(init=False, repr=False, compare=False)
    _toolchain_json: str = field(init=False, repr=False, compare=False)
    _options_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.lane, str):
            raise LaneError(f"key input lane must be a string, got {type(self.lane).__name__} {self.lane!r}")
        lane = get_lane(self.lane, source="key input lane")
        if not isinstance(self.profile, str):
            raise LaneError(f"key input profile must be a string, got {type(self.profile).__name__} {self.profile!r}")
        if self.profile != lane.profile_name:
            raise LaneError(
                f"key input profile {self.profile!r} does not match lane {lane.name}, "
                f"whose emission profile is {lane.profile_name!r}"
            )
        if not isinstance(self.arch, str):
            raise SpecError(f"key input arch must be a target ID string, got {type(self.arch).__name__} {self.arch!r}")
        object.__setattr__(self, "arch", Target.parse(self.arch).id)
        if not isinstance(self.family, str) or not _FAMILY_RE.match(self.family):
            raise SpecError(f"key input family must be a name like 'gemm', got {self.family!r}")
        if not isinstance(self.recipe_digest, str) or not self.recipe_digest or self.recipe_digest != self.recipe_digest.strip():
            raise SpecError(f"key input recipe_digest must be a non-empty string, got {self.recipe_digest!r}")
        if not isinstance(self.options, Mapping):
            raise SpecError(f"key input options must be a mapping (the compile options), "
                            f"got {type(self.options).__name__}")
        if not isinstance(self.spec, Mapping):
            raise SpecError(f"key input spec must be a mapping, got {type(self.spec).__name__}")
        if not isinstance(self.toolchain, Mapping) or not self.toolchain:
            raise SpecError("key input toolchain must be a non-empty mapping (the toolchain identity)")
        for k, v in self.toolchain.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SpecError(f"toolchain identity must map strings to strings, got {k!r}: {v!r}")
        if "kind" not in self.toolchain:
            raise SpecError("toolchain identity must name its 'kind'")
        for name in ("spec", "toolchain", "options"):
            plain = _check_json(getattr(self, name), "value")  # a fresh plain copy: nothing shared
            object.__setattr__(self, f"_{name}_json", _dumps(plain))
            object.__setattr__(self, name, freeze(plain))

    def __hash__(self) -> int:  # the mappings are unhashable; the encoding is the identity
        return hash(encode(self))

    @property
    def target(self) -> Target:
        """The arch as a Target (the record's string, parsed where the inputs are read)."""
        return Target.parse(self.arch)

    @property
    def spec_json(self) -> str:
        return self._spec_json

    @property
    def toolchain_json(self) -> str:
        return self._toolchain_json

    @property
    def options_json(self) -> str:
        return self._options_json

    def as_dict(self) -> dict[str, Any]:
        return inputs_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KeyInputs:
        missing = [n for n in INPUT_FIELDS if n not in d]
        if missing:
            raise SpecError(f"key inputs lack {', '.join(missing)}")
        return cls(**{n: d[n] for n in INPUT_FIELDS})


INPUT_FIELDS = ("arch", "lane", "profile", "family", "spec", "recipe_digest", "toolchain", "options")


def inputs_dict(obj: Any) -> dict[str, Any]:
    """The key-input fields of ``obj`` (KeyInputs, or a record carrying them) as plain JSON values."""
    return {n: thaw(getattr(obj, n)) for n in INPUT_FIELDS}


def encode(inputs: KeyInputs) -> bytes:
    """The versioned byte encoding the key hashes. Built from the already-canonical parts."""
    if not isinstance(inputs, KeyInputs):
        raise SpecError(f"artifact_key needs KeyInputs, got {type(inputs).__name__}")
    # canonical_json of the eight fields, spliced from the canonical texts __post_init__ made:
    # the same bytes (sorted keys, in this order; strings as json.dumps writes them), without
    # walking the spec again (tests/test_cache_keys.py checks it against canonical_json)
    s = _json_str
    body = (f'{{"arch":{s(inputs.arch)},"family":{s(inputs.family)},"lane":{s(inputs.lane)},'
            f'"options":{inputs.options_json},"profile":{s(inputs.profile)},'
            f'"recipe_digest":{s(inputs.recipe_digest)},"spec":{inputs.spec_json},'
            f'"toolchain":{inputs.toolchain_json}}}')
    return _PREFIX + body.encode()


_PLAIN_STR = re.compile(r"[A-Za-z0-9_.:+\-]*")  # json.dumps writes these as they are, in quotes


def _json_str(value: str) -> str:
    return f'"{value}"' if _PLAIN_STR.fullmatch(value) else json.dumps(value, ensure_ascii=False)


def artifact_key(inputs: KeyInputs) -> str:
    """Hex sha256 of the canonical, versioned encoding of every key input."""
    return hashlib.sha256(encode(inputs)).hexdigest()


_CODE_PREFIX = b"rocke-aot/code-object-key/v1\n"


def code_object_key(arch: str, profile: str, ir_sha256: str, toolchain_json: str, options_json: str) -> str:
    """The key of a code object: sha256 over exactly what the compiler consumed.

    ``toolchain_json`` and ``options_json`` are the canonical JSON texts the store keeps
    (KeyInputs.toolchain_json / options_json); ``arch`` a canonical target ID. The toolchain
    counts as ``arch``'s format sees it (targets.target_identity): another format's tools never
    move the key."""
    if not isinstance(ir_sha256, str) or not _KEY_RE.match(ir_sha256):
        raise SpecError(f"ir_sha256 must be 64 lowercase hex digits, got {ir_sha256!r}")
    body = canonical_json({"arch": arch, "ir_sha256": ir_sha256, "options": json.loads(options_json),
                           "profile": profile, "toolchain": target_identity(json.loads(toolchain_json), arch)})
    return hashlib.sha256(_CODE_PREFIX + body.encode()).hexdigest()


def code_key_of(inputs: KeyInputs, ir_sha256: str) -> str:
    """The code-object key of the IR lowered for ``inputs``."""
    return code_object_key(inputs.arch, inputs.profile, ir_sha256, inputs.toolchain_json, inputs.options_json)


def check_key(key: object) -> str:
    """A key is 64 lowercase hex digits; anything else is a SpecError (never a silent miss)."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise SpecError(f"an artifact key is 64 lowercase hex digits, got {key!r}")
    return key


class KeyTemplate:
    """Keys for many specs that share every other input: the builder's planning fast path.

    The non-spec inputs are validated once (through KeyInputs), their canonical encoding
    is split around the spec, and ``key(spec_json)`` is one sha256 over
    head + spec + tail. ``spec_json`` must be ``canonical_json(spec)``; the result equals
    ``artifact_key(KeyInputs(..., spec, ...))`` byte for byte (tested over whole grids).
    """

    _MARK = "rocke-aot-spec-slot-7f3a"

    def __init__(self, arch: str, lane: str, profile: str, family: str, recipe_digest: str,
                 toolchain: Mapping[str, str], options: Mapping[str, Any]):
        self.proto = KeyInputs(arch, lane, profile, family, {}, recipe_digest, toolchain, options)
        body = canonical_json({**self.proto.as_dict(), "spec": self._MARK})
        parts = body.split(json.dumps(self._MARK), 1)
        if len(parts) != 2 or self._MARK in parts[0] + parts[1]:
            raise SpecError("a key input contains the spec slot marker; cannot template this key")
        self._head = _PREFIX + parts[0].encode()
        self._tail = parts[1].encode()

    def key(self, spec_json: str) -> str:
        return hashlib.sha256(self._head + spec_json.encode() + self._tail).hexdigest()

    def inputs(self, spec: Mapping[str, Any]) -> KeyInputs:
        p = self.proto
        return KeyInputs(p.arch, p.lane, p.profile, p.family, spec, p.recipe_digest, p.toolchain, p.options)
