"""A pip-installable wheel written with the standard library (PEP 427 / 376 / 566).

    write(out_dir, name, version, files={path in the wheel: bytes}, entry_points={group: {name: value}},
          summary=) -> the .whl path
        <dist>-<version>.dist-info/METADATA, WHEEL (py3-none-any, purelib), entry_points.txt and
        RECORD (every file's sha256 as urlsafe base64 without padding, and its size; RECORD's own
        line without either), in one zip with fixed timestamps and sorted members: the same input
        gives the same bytes

Used by `rocke-aot export --wheel` (cli/export.py) for device wheels of one arch's kernels.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

from rocke_aot.errors import SpecError
from rocke_aot.paths import atomic_write

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_DATE = (2020, 1, 1, 0, 0, 0)


def normalized(name: str) -> str:
    """The distribution name as a wheel file name spells it (PEP 503 normalized, '-' -> '_')."""
    return re.sub(r"[-_.]+", "_", name).lower()


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write(out_dir: str | os.PathLike, name: str, version: str, files: Mapping[str, bytes], *,
          entry_points: Mapping[str, Mapping[str, str]] | None = None, summary: str = "") -> Path:
    if not _NAME.match(name):
        raise SpecError(f"wheel name {name!r} is not a valid distribution name")
    if not _VERSION.match(version):
        raise SpecError(f"wheel version {version!r}: digits and dots only (a release segment)")
    dist = f"{normalized(name)}-{version}"
    info = f"{dist}.dist-info"
    members = dict(files)
    for path in members:
        if path.startswith("/") or ".." in path.split("/") or path.startswith(info):
            raise SpecError(f"wheel member {path!r} is outside the package")
    members[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   f"Summary: {summary}\n").encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: rocke-aot\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if entry_points:
        text = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(eps.items())) + "\n"
                       for group, eps in sorted(entry_points.items()))
        members[f"{info}/entry_points.txt"] = text.encode()
    record = "".join(f"{p},{record_hash(d)},{len(d)}\n" for p, d in sorted(members.items()))
    members[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path in sorted(members, key=lambda p: (p.startswith(info), p)):  # dist-info last (PEP 427)
            zi = zipfile.ZipInfo(path, date_time=_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_STORED if path.endswith(".kpack") else zipfile.ZIP_DEFLATED
            z.writestr(zi, members[path])
    out = Path(out_dir) / f"{dist}-py3-none-any.whl"
    atomic_write(out, buf.getvalue())
    return out


__all__ = ["normalized", "record_hash", "write"]
