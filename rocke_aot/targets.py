"""Targets: a full arch target ID parsed into a frozen value.

    "gfx942:sramecc+:xnack-" --Target.parse--> Target(processor="gfx942",
                                                     features=(("sramecc", True), ("xnack", False)))
    Target.triple        "amdgcn-amd-amdhsa" | "nvptx64-nvidia-cuda"
    Target.llvm_features "+sramecc,-xnack"   (what the target machine is created with)
    Target.id            the canonical target ID (features sorted), used in cache keys

Unknown processors and features are refused here, before anything reaches LLVM
(LLVM ignores an unknown processor with a warning and then misbehaves).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from rocke_aot.errors import SpecError
from rocke_aot.arch import ARCHES, ArchInfo, arch_info

_TRIPLES = {"amdgcn": "amdgcn-amd-amdhsa", "nvptx64": "nvptx64-nvidia-cuda"}
_FEATURE_RE = re.compile(r"^([a-z][a-z0-9_]*)([+-])$")


@dataclass(frozen=True)
class Target:
    processor: str
    features: tuple[tuple[str, bool], ...] = ()  # sorted by name

    @classmethod
    def parse(cls, target_id: object) -> "Target":
        if isinstance(target_id, Target):
            return target_id
        if isinstance(target_id, str):
            return _parse_cached(cls, target_id)  # targets are immutable: parse each ID once
        return cls._parse(target_id)

    @classmethod
    def _parse(cls, target_id: object) -> "Target":
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
        return cls(processor, tuple(sorted(seen.items())))

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


@functools.lru_cache(maxsize=1024)
def _parse_cached(cls: type, target_id: str) -> Target:
    return cls._parse(target_id)
