"""Synthetic artifacts for the selection tests and bench: real store puts, fake code objects.

    put_fake(store, arch, lane, family, spec, digest=..., vgprs=..., ...) -> Artifact
        the bytes are a small unique blob (no compiler runs); the metadata's "code_object"
        section has the fields aot/codeobject.py validate() writes, with the given resources
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from rocke_aot.cache.keys import KeyInputs
from rocke_aot.lanes import get_lane

TOOLCHAIN = {"kind": "fake", "llvm": "22.1.0"}


def fake_inputs(arch: str, lane: str, family: str, spec: Mapping[str, Any], digest: str = "d1",
                toolchain: Mapping[str, str] | None = None) -> KeyInputs:
    return KeyInputs(arch, lane, get_lane(lane).profile_name, family, dict(spec), digest, dict(toolchain or TOOLCHAIN),
                     {"speed_level": 3})


def code_object_section(*, vgprs: int = 32, sgprs: int = 24, lds: int = 0, workgroup: int = 256,
                        vgpr_spills: int = 0, sgpr_spills: int = 0, agprs: int = 0) -> dict[str, Any]:
    return {"format": "hsaco", "vgpr_count": vgprs, "sgpr_count": sgprs, "agpr_count": agprs, "lds_bytes": lds,
            "vgpr_spill_count": vgpr_spills, "sgpr_spill_count": sgpr_spills, "private_segment_bytes": 0,
            "max_flat_workgroup_size": workgroup, "wavefront_size": 64}


def put_fake(store, arch: str, lane: str, family: str, spec: Mapping[str, Any], *, digest: str = "d1",
             toolchain: Mapping[str, str] | None = None, **resources: Any):
    inputs = fake_inputs(arch, lane, family, spec, digest, toolchain)
    blob = b"\x7fELF-fake-" + hashlib.sha256(repr((arch, lane, family, sorted(spec.items()), digest)).encode()).digest()
    return store.put(inputs, blob, ir_sha256=hashlib.sha256(blob).hexdigest(),
                     metadata={"code_object": code_object_section(**resources), "format": "hsaco"},
                     provenance={"test": True})
