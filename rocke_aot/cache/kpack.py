"""kpack archives (TheRock RFC0008) and rocKE bundle manifests of the store's kernels.

    write(path, kernels, arch_family=, arches=)       one archive, RFC0008's layout exactly:
        header   16 bytes, little-endian: b"KPAK", uint32 format version (1), uint64 TOC offset
        padding  zeros to the next 64-byte boundary (the blob data starts at offset 64)
        blob     "zstd-per-kernel": uint32 kernel count, then per ordinal a uint32 frame size and
                 one zstd frame (each kernel compressed on its own, level 3 as rocm_kpack's
                 default, content size in the frame header)
        TOC      MessagePack map at the TOC offset, to the end of the file:
                 {"format_version": 1, "group_name", "gfx_arch_family", "gfx_arches",
                  "compression_scheme": "zstd-per-kernel", "zstd_offset", "zstd_size",
                  "toc": {toc name: {arch: {"type": "hsaco", "ordinal", "original_size"}}}}
    read(path) -> Archive      the same layout read back with every bound checked (KpackError)
    toc_name(family, lane, key) "rocke_aot/<family>/<lane>/<artifact key>#0": deterministic,
                                one code object per name (the HIP loader's "<binary>#<index>")

    manifest(arch, kpack bytes, artifacts, spans) -> the rocke.aot.bundle/v1 manifest: per kernel
        rocKE's sidecar fields (rocke.aot.sidecar/v1: symbol, sha256, size, launch grid formula,
        block, shared memory, argument signature, selection constraints), all derived from the
        launch contract the store holds (rocke_aot/launch.py), plus the key inputs, ir_sha256,
        metadata and provenance, so an importer recomputes the key and the sidecar itself;
        written as canonical JSON (sorted keys, no spaces): the bytes a signature covers.
    check_manifest(doc) -> entries  the manifest's shape (KpackError naming the field)
    sidecar_of(key, inputs, metadata) the sidecar fields of one kernel (export and import agree)

Nothing here signs or verifies a signature (cache/ sits below trust/): the CLI signs the
manifest bytes (cli/export.py) and client/device_kernels.py verifies them.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from rocke_aot.boundedjson import is_int
from rocke_aot.cache.keys import INPUT_FIELDS, KeyInputs, artifact_key, thaw
from rocke_aot.errors import KpackError, SpecError
from rocke_aot.launch import LaunchContract
from rocke_aot.paths import atomic_write
from rocke_aot.targets import Target

MAGIC = b"KPAK"
FORMAT_VERSION = 1
HEADER = struct.Struct("<4sIQ")
U32 = struct.Struct("<I")
ALIGN = 64
SCHEME = "zstd-per-kernel"
SCHEMES = ("none", SCHEME)
LEVEL = 3  # rocm_kpack's default zstd level for zstd-per-kernel
GROUP = "rocke_aot"
BUNDLE_SCHEMA = "rocke.aot.bundle/v1"
SIDECAR_SCHEMA = "rocke.aot.sidecar/v1"
MAX_TOC = 64 << 20  # TOC bytes
MAX_KERNEL = 256 << 20  # one decompressed code object (as cache/bundle.py MAX_BLOB)
MAX_KERNELS = 1 << 20
MAX_MANIFEST = 64 << 20


def toc_name(family: str, lane: str, key: str) -> str:
    return f"{GROUP}/{family}/{lane}/{key}#0"


# ---- the archive -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Span:
    """Where one ordinal's zstd frame lies in the file."""

    ordinal: int
    offset: int
    size: int

    def as_dict(self) -> dict[str, int]:
        return {"ordinal": self.ordinal, "frame_offset": self.offset, "frame_size": self.size}


def encode(kernels: Sequence[tuple[str, str, bytes]], *, arch_family: str, arches: Sequence[str],
           level: int = LEVEL) -> tuple[bytes, list[Span]]:
    """The archive's bytes for ``kernels`` [(toc name, arch, code object)] in ordinal order."""
    if len(kernels) > MAX_KERNELS:
        raise KpackError(f"{len(kernels)} kernels: over {MAX_KERNELS} in one archive")
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
    toc: dict[str, dict[str, dict[str, Any]]] = {}
    start = -(-HEADER.size // ALIGN) * ALIGN
    parts = [U32.pack(len(kernels))]
    offset = start + U32.size
    spans = []
    for ordinal, (name, arch, raw) in enumerate(kernels):
        if arch in toc.get(name, {}):
            raise KpackError(f"kernel {name} @ {arch} twice in one archive")
        frame = cctx.compress(raw)
        parts += [U32.pack(len(frame)), frame]
        spans.append(Span(ordinal, offset + U32.size, len(frame)))
        offset += U32.size + len(frame)
        toc.setdefault(name, {})[arch] = {"type": "hsaco", "ordinal": ordinal, "original_size": len(raw)}
    blob = b"".join(parts)
    doc = {"format_version": FORMAT_VERSION, "group_name": GROUP, "gfx_arch_family": arch_family,
           "gfx_arches": sorted(arches), "compression_scheme": SCHEME, "zstd_offset": start,
           "zstd_size": len(blob), "toc": toc}
    import msgpack  # the serve/build extras carry it; a GPU host reads a device wheel without it

    toc_bytes = msgpack.packb(doc, use_bin_type=True)
    head = HEADER.pack(MAGIC, FORMAT_VERSION, start + len(blob))
    return head + b"\0" * (start - len(head)) + blob + toc_bytes, spans


def write(path: str | os.PathLike, kernels: Sequence[tuple[str, str, bytes]], *, arch_family: str,
          arches: Sequence[str], level: int = LEVEL) -> tuple[bytes, list[Span]]:
    data, spans = encode(kernels, arch_family=arch_family, arches=arches, level=level)
    atomic_write(path, data)
    return data, spans


@dataclass(frozen=True)
class Archive:
    """One .kpack read back: its TOC and where every ordinal's stored bytes lie."""

    path: str
    toc: Mapping[str, Any]
    spans: tuple[tuple[int, int], ...]  # (file offset, size) per ordinal

    @property
    def scheme(self) -> str:
        return self.toc["compression_scheme"]

    def entries(self) -> list[tuple[str, str, Mapping[str, Any]]]:
        return [(name, arch, e) for name, arches in self.toc["toc"].items() for arch, e in arches.items()]

    def get(self, name: str, arch: str) -> bytes:
        """The code object of ``name`` for ``arch``, decompressed within its original_size."""
        try:
            entry = self.toc["toc"][name][arch]
        except KeyError:
            raise KpackError(f"{self.path}: no kernel {name} @ {arch} in its TOC") from None
        offset, size = self.spans[entry["ordinal"]]
        with open(self.path, "rb") as f:
            f.seek(offset)
            stored = f.read(size)
        if self.scheme == "none":
            return stored
        want = entry.get("original_size")
        try:
            claimed = zstandard.frame_content_size(stored)
            if claimed < 0 or claimed > MAX_KERNEL or (want is not None and claimed != want):
                raise KpackError(f"{self.path}: kernel {name} @ {arch}: its frame claims {claimed} bytes, the TOC "
                                 f"{want}")
            return zstandard.ZstdDecompressor().decompress(stored, max_output_size=claimed)
        except zstandard.ZstdError as e:
            raise KpackError(f"{self.path}: kernel {name} @ {arch}: not a zstd frame ({e})") from None


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if not is_int(value) or not lo <= value <= hi:
        raise KpackError(f"{what} must be an int within {lo}..{hi}, got {value!r}")
    return value


def read(path: str | os.PathLike) -> Archive:
    """Read a .kpack's header and TOC and locate every ordinal; every offset bounded by the file."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
            if len(head) < HEADER.size:
                raise KpackError(f"{path}: {len(head)} bytes, shorter than the kpack header")
            magic, version, toc_offset = HEADER.unpack(head)
            if magic != MAGIC:
                raise KpackError(f"{path} is not a kpack archive (magic {magic!r})")
            if version != FORMAT_VERSION:
                raise KpackError(f"{path}: kpack format version {version}, this reader knows {FORMAT_VERSION}")
            _int(toc_offset, f"{path}: the TOC offset", ALIGN, size - 1)
            if size - toc_offset > MAX_TOC:
                raise KpackError(f"{path}: a TOC of {size - toc_offset} bytes, over {MAX_TOC}")
            f.seek(toc_offset)
            toc_bytes = f.read()
            toc = _unpack(toc_bytes, path)
            spans = _spans(f, toc, toc_offset, path)
    except OSError as e:
        raise KpackError(f"cannot read {path} ({e.strerror or e})") from None
    return Archive(path, toc, spans)


def _unpack(data: bytes, path: str) -> dict[str, Any]:
    import msgpack

    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=0, max_ext_len=0)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise KpackError(f"{path}: the TOC is not one MessagePack map ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict):
        raise KpackError(f"{path}: the TOC is a {type(doc).__name__}, not a map")
    if doc.get("format_version") != FORMAT_VERSION:
        raise KpackError(f"{path}: TOC format_version {doc.get('format_version')!r}")
    if doc.get("compression_scheme") not in SCHEMES:
        raise KpackError(f"{path}: unknown compression scheme {doc.get('compression_scheme')!r}")
    if not isinstance(doc.get("toc"), dict) or not isinstance(doc.get("gfx_arches"), list):
        raise KpackError(f"{path}: the TOC lacks its toc map or gfx_arches list")
    return doc


def _spans(f, toc: dict, toc_offset: int, path: str) -> tuple[tuple[int, int], ...]:
    if toc["compression_scheme"] == "none":
        blobs = toc.get("blobs")
        if not isinstance(blobs, list):
            raise KpackError(f"{path}: scheme none without a blobs list")
        spans = []
        for i, b in enumerate(blobs):
            off = _int(b.get("offset") if isinstance(b, dict) else None, f"{path}: blob {i} offset", ALIGN, toc_offset)
            spans.append((off, _int(b.get("size"), f"{path}: blob {i} size", 0, toc_offset - off)))
    else:
        start = _int(toc.get("zstd_offset"), f"{path}: zstd_offset", ALIGN, toc_offset)
        end = start + _int(toc.get("zstd_size"), f"{path}: zstd_size", U32.size, toc_offset - start)
        f.seek(start)
        (count,) = U32.unpack(f.read(U32.size))
        _int(count, f"{path}: the kernel count", 0, min(MAX_KERNELS, (end - start) // U32.size))
        spans, pos = [], start + U32.size
        for i in range(count):
            if pos + U32.size > end:
                raise KpackError(f"{path}: frame {i} starts past the blob data")
            f.seek(pos)
            (n,) = U32.unpack(f.read(U32.size))
            _int(n, f"{path}: frame {i} size", 0, end - pos - U32.size)
            spans.append((pos + U32.size, n))
            pos += U32.size + n
        if pos != end:
            raise KpackError(f"{path}: the frames end at {pos}, zstd_size says {end}")
    for name, arches in toc["toc"].items():
        for arch, e in (arches.items() if isinstance(arches, dict) else ()):
            if not isinstance(e, dict):
                raise KpackError(f"{path}: TOC entry {name} @ {arch} is not a map")
            _int(e.get("ordinal"), f"{path}: ordinal of {name} @ {arch}", 0, len(spans) - 1)
            if e.get("original_size") is not None:
                _int(e["original_size"], f"{path}: original_size of {name} @ {arch}", 0, MAX_KERNEL)
    return tuple(spans)


# ---- the bundle manifest (rocKE's sidecar fields) ----------------------------------------------

def _ptr_type(dtype: str) -> str:
    return f"ptr<{dtype}, global>"


def _formula(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def sidecar_of(key: str, inputs: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """rocKE's sidecar fields of one kernel, from its launch contract and code-object record."""
    md = thaw(metadata)
    if not isinstance(md, dict) or not isinstance(md.get("launch"), dict):
        raise KpackError(f"kernel {key} ({inputs.get('family')}) has no launch contract: a bundle manifest "
                         "states how to launch every kernel it carries")
    try:
        c = LaunchContract.from_dict(md["launch"])
    except SpecError as e:
        raise KpackError(f"kernel {key}: malformed launch contract ({e})") from None
    raw_co, raw_spec = md.get("code_object"), inputs.get("spec")
    co: dict[str, Any] = raw_co if isinstance(raw_co, dict) else {}
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    return {
        "symbol": c.kernel,
        "launch": {
            "problem": list(c.problem),
            "lets": {n: t for n, t in c.lets},
            "grid_formula": {axis: _formula(t) for axis, t in zip("xyz", c.grid)},
            "block": [_formula(b) for b in c.block],
            "shared_mem_bytes": c.dynamic_shared_bytes,
            "static_shared_mem_bytes": co.get("lds_bytes"),
            "kernarg_size": c.kernarg_size,
            "split": c.split.as_dict() if c.split is not None else None,
        },
        "args_signature": [
            {"name": a.name, "kind": "pointer" if a.kind == "global_pointer" else "scalar",
             "type": _ptr_type(a.dtype) if a.kind == "global_pointer" else a.dtype,
             "size_bytes": a.size, "alignment": a.align, "offset": a.offset, "access": a.access,
             ("elements" if a.kind == "global_pointer" else "value"): _formula(a.expr)}
            for a in c.args],
        "selection": {
            "op": inputs.get("family"), "family": inputs.get("family"), "arch": inputs.get("arch"),
            "lane": inputs.get("lane"), "shape_fields": list(c.problem),
            "attribute_constraints": {k: {"equals": v} for k, v in sorted(spec.items())
                                      if isinstance(v, (str, int, float, bool))},
        },
    }


def entry_of(art: Any, span: Span, arch: str) -> dict[str, Any]:
    """One manifest entry: the sidecar fields, where the kernel lies, and its store record."""
    inputs = {n: thaw(getattr(art, n)) for n in INPUT_FIELDS}
    return {"toc_key": toc_name(art.family, art.lane, art.key), "arch": arch, "cache_key": art.key,
            "schema": SIDECAR_SCHEMA, "sha256": art.sha256, "size": art.size, **span.as_dict(),
            **sidecar_of(art.key, inputs, art.metadata), "inputs": inputs, "ir_sha256": art.ir_sha256,
            "metadata": thaw(art.metadata), "provenance": thaw(art.provenance)}


def manifest(arch: str, kpack_name: str, kpack_bytes: bytes, entries: list[dict[str, Any]]) -> dict[str, Any]:
    from rocke_aot import __version__

    return {"schema": BUNDLE_SCHEMA, "producer": "rocke-aot", "producer_version": __version__, "arch": arch,
            "kpack": kpack_name, "kpack_sha256": hashlib.sha256(kpack_bytes).hexdigest(),
            "kpack_size": len(kpack_bytes), "group_name": GROUP, "compression_scheme": SCHEME,
            "entries": sorted(entries, key=lambda e: e["toc_key"])}


def dumps(doc: Mapping[str, Any]) -> bytes:
    """Canonical JSON: the exact bytes a manifest signature covers."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


_ENTRY_FIELDS: dict[str, type] = {"toc_key": str, "arch": str, "cache_key": str, "sha256": str, "size": int, "ordinal": int,
                 "frame_offset": int, "frame_size": int, "symbol": str, "launch": dict, "args_signature": list,
                 "selection": dict, "inputs": dict, "metadata": dict, "provenance": dict}


def loads(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST:
        raise KpackError(f"{what}: {len(data)} bytes, over {MAX_MANIFEST}")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise KpackError(f"{what} is not JSON ({type(e).__name__}: {str(e)[:200]})") from None
    return check_manifest(doc, what)


def check_manifest(doc: Any, what: str = "bundle manifest") -> dict[str, Any]:
    """The manifest's shape, every entry's key (recomputed from its inputs) and its sidecar
    fields (recomputed from its launch contract): KpackError naming the field otherwise."""
    if not isinstance(doc, dict) or doc.get("schema") != BUNDLE_SCHEMA:
        raise KpackError(f"{what}: not a {BUNDLE_SCHEMA} manifest (schema "
                         f"{doc.get('schema') if isinstance(doc, dict) else type(doc).__name__!r})")
    for name, typ in (("arch", str), ("kpack", str), ("kpack_sha256", str), ("kpack_size", int), ("entries", list)):
        if not isinstance(doc.get(name), typ) or isinstance(doc.get(name), bool):
            raise KpackError(f"{what}: the field {name!r} must be {typ.__name__}")
    if "/" in doc["kpack"] or doc["kpack"] in ("", ".", ".."):
        raise KpackError(f"{what}: kpack {doc['kpack']!r} must be a file name beside the manifest")
    seen = set()
    for i, e in enumerate(doc["entries"]):
        where = f"{what}: entry {i}"
        if not isinstance(e, dict):
            raise KpackError(f"{where} is not an object")
        for name, entry_type in _ENTRY_FIELDS.items():
            if not isinstance(e.get(name), entry_type) or isinstance(e.get(name), bool):
                raise KpackError(f"{where}: the field {name!r} must be {entry_type.__name__}")
        where = f"{what}: entry {e['toc_key'][:120]}"
        if e["toc_key"] in seen:
            raise KpackError(f"{where} appears twice")
        seen.add(e["toc_key"])
        try:
            key = artifact_key(KeyInputs.from_dict(e["inputs"]))
        except (SpecError, TypeError, ValueError) as err:
            raise KpackError(f"{where}: malformed key inputs ({err})") from None
        if key != e["cache_key"]:
            raise KpackError(f"{where}: its inputs hash to {key}, not its cache_key {e['cache_key']}")
        if e["toc_key"] != toc_name(e["inputs"]["family"], e["inputs"]["lane"], key):
            raise KpackError(f"{where}: toc_key is not {toc_name(e['inputs']['family'], e['inputs']['lane'], key)}")
        if e["arch"] != doc["arch"] or e["inputs"]["arch"] != doc["arch"]:
            raise KpackError(f"{where}: built for {e['inputs']['arch']}, in a manifest of {doc['arch']}")
        want = sidecar_of(key, e["inputs"], e["metadata"])
        for name, value in want.items():
            if e.get(name) != value:
                raise KpackError(f"{where}: {name} disagrees with its launch contract")
    return doc


def entries_by_sha(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {e["sha256"]: e for e in doc["entries"]}


def kpack_path(manifest_path: str | os.PathLike, doc: Mapping[str, Any]) -> Path:
    return Path(manifest_path).with_name(doc["kpack"])


# ---- store <-> archive -------------------------------------------------------------------------

PAGE = 1000


def served(store: Any, arch: str, families: Sequence[str] = ()) -> list[Any]:
    """The artifacts ``store`` serves for exactly ``arch`` (of ``families``, when given), key order."""
    out, cursor = [], None
    while True:
        page = store.find(arch=arch, served_only=True, after=cursor, limit=PAGE)
        out += [a for a in page if not families or a.family in families]
        if len(page) < PAGE:
            return out
        cursor = page[-1].key


def file_stem(arch: str) -> str:
    """rocKE's per-arch name (``rocke_client_<arch>``) with this project's group: rocke_aot_<arch>."""
    return f"{GROUP}_{arch.replace(':', '_')}"


def export(store: Any, out_dir: str | os.PathLike, target: Target, families: Sequence[str] = (), *,
           level: int = LEVEL) -> tuple[Path, Path, dict[str, Any], bytes]:
    """Write ``<out>/rocke_aot_<arch>.kpack`` and its manifest ``rocke_aot_<arch>.json`` of every kernel
    the store serves for ``target``; returns (kpack path, manifest path, manifest, manifest bytes)."""
    arch = target.id
    arts = sorted(served(store, arch, families), key=lambda a: toc_name(a.family, a.lane, a.key))
    if not arts:
        raise SpecError(f"the store serves no kernel for {arch}"
                        + (f" of {', '.join(families)}" if families else "") + ": nothing to export")
    for a in arts:  # every kernel must say how to launch it before a byte is written
        sidecar_of(a.key, {n: thaw(getattr(a, n)) for n in INPUT_FIELDS}, a.metadata)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(arch)
    kernels = [(toc_name(a.family, a.lane, a.key), arch, store.get_blob(a.sha256)) for a in arts]
    data, spans = write(out / f"{stem}.kpack", kernels, arch_family=arch, arches=[arch], level=level)
    doc = manifest(arch, f"{stem}.kpack", data, [entry_of(a, sp, arch) for a, sp in zip(arts, spans)])
    body = dumps(doc)
    atomic_write(out / f"{stem}.json", body)
    return out / f"{stem}.kpack", out / f"{stem}.json", doc, body


# check(code object, arch) -> its resources (aot/codeobject.py validate(...).as_dict()); raises a RockeError
CodeCheck = Callable[[bytes, str], dict[str, Any]]


def verified_kernels(doc: Mapping[str, Any], kpack: str | os.PathLike, check: CodeCheck | None
                     ) -> list[tuple[Mapping[str, Any], bytes, dict[str, Any]]]:
    """Every kernel of a checked manifest read from ``kpack`` and verified: the file's size and
    sha256, each TOC entry where the manifest says (ordinal, frame), the bytes' size and sha256,
    ``check`` (the ELF arch and resources); -> [(entry, code object, metadata with the resources
    read from the code object)]. KpackError naming the kernel on any mismatch."""
    from rocke_aot import record
    from rocke_aot.errors import RockeError

    kpack = Path(kpack)
    try:
        size = kpack.stat().st_size
    except OSError as err:
        raise KpackError(f"cannot read {kpack} ({err.strerror})") from None
    if size != doc["kpack_size"]:
        raise KpackError(f"{kpack}: {size} bytes, the manifest says {doc['kpack_size']}")
    h = hashlib.sha256()
    with open(kpack, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != doc["kpack_sha256"]:
        raise KpackError(f"{kpack} is tampered or corrupt: its sha256 is {h.hexdigest()}, the manifest says "
                         f"{doc['kpack_sha256']}")
    archive = read(kpack)
    if doc["arch"] not in archive.toc["gfx_arches"]:
        raise KpackError(f"{kpack}: its TOC lists {archive.toc['gfx_arches']}, not {doc['arch']}")
    out = []
    for e in doc["entries"]:
        where = f"{kpack.name}: kernel {e['toc_key']}"
        toc_entry = archive.toc["toc"].get(e["toc_key"], {}).get(e["arch"])
        if not isinstance(toc_entry, dict) or toc_entry.get("ordinal") != e["ordinal"]:
            raise KpackError(f"{where}: not in the archive's TOC at ordinal {e['ordinal']}")
        if archive.spans[e["ordinal"]] != (e["frame_offset"], e["frame_size"]):
            raise KpackError(f"{where}: its frame is not where the manifest says")
        raw = archive.get(e["toc_key"], e["arch"])
        if len(raw) != e["size"] or hashlib.sha256(raw).hexdigest() != e["sha256"]:
            raise KpackError(f"{where} is tampered or corrupt: {len(raw)} bytes of sha256 "
                             f"{hashlib.sha256(raw).hexdigest()}, the manifest says {e['size']} of {e['sha256']}")
        md = dict(e["metadata"])
        if check is not None:
            try:
                co = check(raw, e["arch"])
            except RockeError as err:
                raise KpackError(f"{where} is not a valid code object for {e['arch']}: "
                                 f"{type(err).__name__}: {err}") from None
            md = {**md, "code_object": co, "format": co.get("format", "hsaco")}
        try:
            record.check_metadata(md)
        except record.RecordError as err:
            raise KpackError(f"{where}: its record disagrees with its code object ({err})") from None
        if sidecar_of(e["cache_key"], e["inputs"], md)["symbol"] != e["symbol"]:
            raise KpackError(f"{where}: symbol {e['symbol']!r} is not its code object's kernel")
        out.append((e, raw, md))
    return out


def import_kpack(store: Any, manifest_path: str | os.PathLike, *, check: CodeCheck | None = None,
                 data: bytes | None = None) -> dict[str, Any]:
    """Verify a kpack and its manifest (verified_kernels: all of them, before anything is stored),
    then put every kernel under the key of its inputs; returns a summary."""
    manifest_path = Path(manifest_path)
    if data is None:
        try:
            data = manifest_path.read_bytes()
        except OSError as err:
            raise KpackError(f"cannot read {manifest_path} ({err.strerror})") from None
    doc = loads(data, str(manifest_path))
    kernels = verified_kernels(doc, kpack_path(manifest_path, doc), check)
    added = unchanged = 0
    for e, raw, md in kernels:
        inputs = KeyInputs.from_dict(e["inputs"])
        before = store.lookup_many([e["cache_key"]]).get(e["cache_key"])
        store.put(inputs, raw, ir_sha256=e["ir_sha256"], metadata=md, provenance=e["provenance"])
        if before is not None and before.kind == "artifact":
            unchanged += 1
        else:
            added += 1
    store.plans.adopt_imported()
    return {"manifest": str(manifest_path), "kpack": doc["kpack"], "arch": doc["arch"], "kernels": len(kernels),
            "artifacts": added, "unchanged": unchanged}


__all__ = ["ALIGN", "BUNDLE_SCHEMA", "FORMAT_VERSION", "GROUP", "HEADER", "MAGIC", "SCHEME", "SIDECAR_SCHEMA",
           "Archive", "KpackError", "Span", "check_manifest", "dumps", "encode", "entry_of", "loads", "manifest",
           "export", "import_kpack", "read", "served", "sidecar_of", "toc_name", "verified_kernels", "write"]
