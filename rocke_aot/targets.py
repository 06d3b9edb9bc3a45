"""Targets: a full arch target ID parsed into a frozen value.

    "gfx942:sramecc+:xnack-" --Target.parse--> Target(processor="gfx942",
                                                     features=(("sramecc", True), ("xnack", False)))
    Target.triple        "amdgcn-amd-amdhsa" | "nvptx64-nvidia-cuda"
    Target.llvm_features "+sramecc,-xnack"   (what the target machine is created with)
    Target.id            the canonical target ID (features sorted), used in cache keys
    Target.code_format   "hsaco" | "cubin"; FORMAT_TOOLS[format]: the tools besides the compiler
                         whose identity a key of that format holds (target_identity applies it)
    code.compatible_with(device) / compatible(code, device) / compatible_ids(device)
                         LLVM's target-ID matching: which artifacts a device may run

Unknown processors and features are refused here, before anything reaches LLVM
(LLVM ignores an unknown processor with a warning and then misbehaves).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rocke_aot.arch import ARCHES, ArchInfo, arch_info
from rocke_aot.errors import SpecError

_TRIPLES = {"amdgcn": "amdgcn-amd-amdhsa", "nvptx64": "nvptx64-nvidia-cuda"}
# ELF e_machine of each family's code objects: EM_AMDGPU (HSACO), EM_CUDA (cubin)
ELF_MACHINE = {"amdgcn": 224, "nvptx64": 190}
_FEATURE_RE = re.compile(r"^([a-z][a-z0-9_]*)([+-])$")

# The code object each family's targets compile to.
CODE_FORMAT = {"amdgcn": "hsaco", "nvptx64": "cubin"}
# The one rule of which tools, besides the compiler, shape a format's bytes, so that a key of
# that format holds their identity and no other's: ld.lld links an HSACO (its version line goes
# into the .comment section); ptxas assembles a cubin. Neither touches the other format's
# bytes, so another CUDA moves no AMD key and another ld.lld moves no cubin key.
FORMAT_TOOLS = {"hsaco": ("linker",), "cubin": ("ptxas",)}
# The identity fields each tool writes (aot/compiler/lld.py linker_identity,
# aot/compiler/ptx.py ptxas_identity; tests/test_target_identity.py holds them to it).
TOOL_FIELDS = {"linker": ("linker", "linker_sha256"), "ptxas": ("ptxas", "ptxas_sha256")}


def target_identity(identity: Mapping[str, str], target: Target | str) -> dict[str, str]:
    """A toolchain identity as a key of ``target`` holds it: the fields of every tool that
    ``target``'s format does not use (FORMAT_TOOLS) dropped, every other field as it is.

    Toolchains build their identity per target by the same rule (aot/toolchains/base.py
    Toolchain.identity); this form also reads identities written before the rule (a store's
    old rows, an old bundle: cache/keys.py code_object_key, migration 0009)."""
    used = FORMAT_TOOLS[Target.parse(target).code_format]
    drop = {f for tool, fields in TOOL_FIELDS.items() if tool not in used for f in fields}
    return {k: v for k, v in identity.items() if k not in drop}


@dataclass(frozen=True)
class Target:
    processor: str
    features: tuple[tuple[str, bool], ...] = ()  # sorted by name

    @classmethod
    def parse(cls, target_id: object) -> Target:
        if isinstance(target_id, Target):
            return target_id
        if isinstance(target_id, str) and cls is Target:
            return _parse_cached(target_id)  # targets are immutable: parse each ID once
        return cls._parse(target_id)

    @classmethod
    def _parse(cls, target_id: object) -> Target:
        return cls(*_split_id(target_id))

    @property
    def info(self) -> ArchInfo:
        return ARCHES[self.processor]

    @property
    def family(self) -> str:
        return self.info.family

    @property
    def triple(self) -> str:
        return _TRIPLES[self.family]

    @property
    def elf_machine(self) -> int:
        """The ELF e_machine of this target's code objects (ELF_MACHINE)."""
        return ELF_MACHINE[self.family]

    @property
    def code_format(self) -> str:
        """"hsaco" or "cubin": what this target's code objects are (CODE_FORMAT)."""
        return CODE_FORMAT[self.family]

    @property
    def is_amdgpu(self) -> bool:
        return self.family == "amdgcn"

    @property
    def wave_size(self) -> int:
        return self.info.wave_size

    @property
    def llvm_features(self) -> str:
        return ",".join(("+" if on else "-") + name for name, on in self.features)

    def feature(self, name: str) -> bool | None:
        """True/False when the target ID sets it, None when it is 'any'."""
        return dict(self.features).get(name)

    @property
    def id(self) -> str:
        return ":".join([self.processor] + [f"{n}{'+' if on else '-'}" for n, on in self.features])

    def __str__(self) -> str:
        return self.id

    def compatible_with(self, device: Target | str) -> bool:
        """Whether code built for this target ID may run on ``device`` (see :func:`compatible`)."""
        return compatible(self, device)


@functools.lru_cache(maxsize=1024)
def _parse_cached(target_id: str) -> Target:
    return Target(*_split_id(target_id))


def _split_id(target_id: object) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """A target ID's processor and its features (sorted by name), or SpecError."""
    if not isinstance(target_id, str) or not target_id:
        raise SpecError(f"an arch must be a target ID string such as 'gfx942', got {target_id!r}")
    processor, *feats = target_id.split(":")
    info = arch_info(processor)
    seen: dict[str, bool] = {}
    for feat in feats:
        m = _FEATURE_RE.match(feat)
        if not m:
            raise SpecError(f"malformed target feature {feat!r} in {target_id!r} (expected e.g. 'xnack-')")
        name, sign = m.groups()
        if name not in info.target_features:
            raise SpecError(
                f"{processor} has no target feature {name!r} (it accepts: "
                f"{', '.join(info.target_features) or 'none'})"
            )
        if name in seen:
            raise SpecError(f"target feature {name!r} given twice in {target_id!r}")
        seen[name] = sign == "+"
    return processor, tuple(sorted(seen.items()))


# -- compatibility (LLVM AMDGPUUsage "Target ID") ---------------------------------------------
#
#     code object's target ID      device's target ID            runs?
#     gfx942                       gfx942:sramecc+:xnack-        yes  (features "any" match either)
#     gfx942:xnack-                gfx942:sramecc+:xnack-        yes
#     gfx942:xnack+                gfx942:sramecc+:xnack-        no   (on vs off)
#     gfx90a                       gfx942                        no   (another processor, never)
#
# A feature the code object leaves unset ("any") was compiled to work with either setting.
# A feature the code object sets must equal the device's. A device ID that leaves a feature
# unset does not say which mode the device runs in, so it matches only code that leaves it
# unset too (fail closed: never hand out code that may fault on the real mode).


def compatible(code: Target | str, device: Target | str) -> bool:
    """Whether a code object built for target ID ``code`` may run on a ``device`` target ID."""
    code_t, device_t = Target.parse(code), Target.parse(device)
    if code_t.processor != device_t.processor:
        return False
    dev = dict(device_t.features)
    return all(dev.get(name) is on for name, on in code_t.features)  # not None (unset) nor the opposite


def processor_ids(target: Target) -> tuple[str, ...]:
    """Every target ID of the device's processor (any/on/off per feature): at most nine."""
    opts: list[tuple[tuple[str, bool], ...]] = [()]
    for name in target.info.target_features:
        opts = [o + extra for o in opts for extra in ((), ((name, True),), ((name, False),))]
    return tuple(Target(target.processor, tuple(sorted(o))).id for o in opts)


def compatible_ids(device: Target | str) -> tuple[str, ...]:
    """Every canonical target ID whose code objects run on ``device`` (most specific first).

    For each feature the device sets, the code may set it the same way or leave it unset;
    a feature the device leaves unset must be unset in the code too. Small: at most four IDs.
    """
    device_t = Target.parse(device)
    options: list[list[tuple[str, bool] | None]] = []
    for name, on in device_t.features:
        options.append([(name, on), None])
    out = []
    for combo in _product(options):
        feats = tuple(f for f in combo if f is not None)
        out.append(Target(device_t.processor, feats).id)
    return tuple(out)


def _product(options: list[list]) -> list[tuple]:
    out: list[tuple] = [()]
    for opts in options:
        out = [prev + (o,) for prev in out for o in opts]
    return out
