"""Export/import bundles: one uncompressed tar file with a manifest and the zstd blobs.

    bundle.tar
      manifest.json            {"format": "rocke-aot-bundle", "version": 3,
                                "entries": [artifact or failure, with every key input],
                                "blobs": {raw sha256: {size, stored_size, codec, stored_sha256,
                                                       dict_sha256 (when zstd-dict)}},
                                "dicts": {dict sha256: {arch, family, samples}},
                                "triton": {Triton's cache key: {artifact_key, files: {filename:
                                           raw sha256}}}}   the Triton cache entry of every
                                           Triton build it carries (cache/triton_entries.py:
                                           <kernel>.json, the binary = the artifact's blob,
                                           the group file), its files among the blobs
      dicts/<sha256>.zdict     trained zstd dictionaries the blobs need (before any blob)
      blobs/<raw sha256>.zst   the stored (already zstd) bytes, exactly as in the store

    export: read rows + blobs ─> decode every blob (a corrupt one refuses the export)
            ─> write <path>.tmp ─> fsync ─> rename   (a bundle is complete or absent)
    import: manifest checked first (rocke_aot/boundedjson.py while it is parsed: at most
            MAX_MANIFEST bytes, MAX_DEPTH deep, MAX_MANIFEST_ITEMS values; tar headers at most
            MAX_TAR_HEADER bytes before they are read; format,
            every key recomputed from its inputs, every record through the record schema
            (rocke_aot/record.py), dates finite numbers, every blob referenced and present
            exactly once, its sizes at most MAX_BLOB) ─> ONE exclusive write transaction:
            per dictionary: sha256 ─> publish (or reuse by sha256, mapped to the local id);
            per blob member: size, stored sha256, the zstd frame's declared content size
            (before any byte is decompressed), decompress, raw sha256, then ``check`` (the
            CLI passes aot's code-object validation, as a publish runs it: the resources
            stored are the ones read from the code object) ─> blobs.publish;
            then every entry (artifacts.publish_row, the one way an 'ok' row enters the
            table, as a put does); failure entries only with ``failures=True`` (a crafted
            "failed" record would make builds skip a real kernel); then every Triton entry,
            checked against the record of the artifact it names (check_triton: the file names
            and sha256s its metadata["triton"] states, the binary its code object, the group
            file listing the other two, <kernel>.json Triton's metadata whose hash is the key,
            of the record's version and target) and published as that build's
            (triton_entries.publish). Any mismatch raises BundleError and rolls back: nothing
            from a tampered bundle is ever published. Version 2 bundles (no Triton entries)
            still import.

Blobs travel compressed (no second compression pass), and the tar is never extracted
to disk: members are read by name, so a crafted path cannot escape anywhere. The bundle
part reaches the store through the parts Store hands it (its engine and its Blobs) and
artifacts.publish_row; it never imports Store (the store is above it); Store.import_ then lets the imported rows join their generations
(Plans.adopt_imported) in a second transaction.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from rocke_aot import boundedjson, record
from rocke_aot.cache import artifacts, codec, db, triton_entries
from rocke_aot.cache.blobs import Blobs
from rocke_aot.cache.keys import KeyInputs, artifact_key, canonical_json
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.models import zstd_dicts as D
from rocke_aot.cache.provenance import Entry
from rocke_aot.errors import BundleError, CacheError, IntegrityError, RockeError
from rocke_aot.targets import Target

FORMAT = "rocke-aot-bundle"
VERSION = 3  # v2: entries carry recipe_digest and options (cache key v2); v3: Triton cache entries
READS = (2, 3)
MANIFEST = "manifest.json"
_MEMBER_RE = re.compile(r"^blobs/([0-9a-f]{64})\.zst$")
_DICT_RE = re.compile(r"^dicts/([0-9a-f]{64})\.zdict$")
MAX_MANIFEST = 64 << 20  # manifest bytes (about 20,000 entries with full metadata)
MAX_BLOB = 256 << 20  # raw or stored bytes of one blob (a code object is kilobytes to megabytes)
MAX_DICT = 16 << 20  # one zstd dictionary
MAX_DEPTH = record.MAX_DEPTH + 4  # manifest -> entries -> entry -> metadata
# Values of one manifest (JSON structural tokens: '[', '{', ','): a real entry with full metadata is
# about 400 and 7 KB (measured on a gemm bundle), so MAX_MANIFEST holds about 9,500 such entries
MAX_MANIFEST_ITEMS = 4_000_000
MANIFEST_LIMITS = boundedjson.Limits(MAX_MANIFEST, MAX_DEPTH, MAX_MANIFEST_ITEMS, MAX_MANIFEST)
MAX_TAR_HEADER = 64 << 10  # a pax / GNU long-name header's bytes (a path is under 100 characters here)


class BoundedTarInfo(tarfile.TarInfo):
    """Tar headers read with a bound: an extended (pax) or GNU long-name header larger than
    MAX_TAR_HEADER is refused before tarfile reads it into memory (a 1 GiB header cost 3.1 GB)."""

    def _proc_member(self, tarfile_):
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                         tarfile.SOLARIS_XHDTYPE) and self.size > MAX_TAR_HEADER:
            raise tarfile.HeaderError(f"an extended header of {self.size} bytes, over the {MAX_TAR_HEADER}-byte bound")
        return super()._proc_member(tarfile_)
# check(raw code object, arch) -> its resources (CodeObjectInfo.as_dict()); raises a RockeError
CodeCheck = Callable[[bytes, str], dict[str, Any]]
_MAX_TIME = 2.0**34  # seconds since the epoch (year 2514): a date beyond is malformed


def _entry(row: Any) -> dict[str, Any]:
    e = {
        "key": row["key"],
        "status": row["status"],
        "arch": row["arch"],
        "lane": row["lane"],
        "profile": row["profile"],
        "family": row["family"],
        "spec": json.loads(row["spec_json"]),
        "recipe_digest": row["recipe_digest"],
        "toolchain": json.loads(row["toolchain_json"]),
        "options": json.loads(row["options_json"]),
        "built_at": row["built_at"],
    }
    if row["status"] == "ok":
        e.update(
            blob_sha256=row["blob_sha256"], ir_sha256=row["ir_sha256"],
            metadata=json.loads(row["metadata_json"]), provenance=json.loads(row["provenance_json"]),
        )
    else:
        e.update(error=row["error"], log=row["log"] or "")
    return e


def export_bundle(engine: Engine, blobs: Blobs, path: str | os.PathLike, *, target: Target | None = None, lane: str | None = None,
                  family: str | None = None, failures: bool = True) -> dict[str, Any]:
    """Write the (filtered) store to one bundle file; returns a summary."""
    path = Path(path)
    conds = []
    if target is not None:
        conds.append(A.c.arch == target.id)
    if lane is not None:
        conds.append(A.c.lane == lane)
    if family is not None:
        conds.append(A.c.family == family)
    if not failures:
        conds.append(A.c.status == "ok")
    with db.read_tx(engine) as conn:
        rows = conn.execute(select(A).where(*conds).order_by(A.c.key)).mappings().all()
        entries = [_entry(r) for r in rows]
        tritons = _triton_of(conn, entries)
        shas = sorted({e["blob_sha256"] for e in entries if e["status"] == "ok"}
                      | {sha for t in tritons.values() for sha in t["files"].values()})
        blob_meta: dict[str, dict[str, Any]] = {}
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        try:
            with open(tmp, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                # Pass 1: verify every blob and record its facts (the manifest comes first in
                # the file); pass 2 streams the same bytes (same read snapshot) into the tar.
                dict_ids: dict[int, str] = {}
                for sha, size, stored_size, cod, data, dict_id in _blob_pages(conn, shas):
                    zdict = blobs.load_dict(conn, dict_id) if dict_id is not None else None
                    codec.decode(data, sha, size, cod, stored_size, zdict)  # never export a corrupt blob
                    blob_meta[sha] = {"size": size, "stored_size": stored_size, "codec": cod,
                                      "stored_sha256": codec.sha256_hex(data)}
                    if zdict is not None:
                        blob_meta[sha]["dict_sha256"] = dict_ids.setdefault(dict_id, zdict.sha256)
                missing = set(shas) - set(blob_meta)
                if missing:
                    raise IntegrityError(f"artifacts reference missing blobs {sorted(missing)[:3]}; run verify")
                dict_rows: db.Rows = conn.execute(
                    select(D.c.id, D.c.arch, D.c.family, D.c.samples).where(D.c.id.in_(list(dict_ids)))
                ).all()
                dicts_meta = {dict_ids[i]: {"arch": a, "family": f, "samples": n} for i, a, f, n in dict_rows}
                manifest = {
                    "format": FORMAT, "version": VERSION, "created_at": time.time(),
                    "entries": entries, "blobs": blob_meta, "dicts": dicts_meta, "triton": tritons,
                }
                _add(tar, MANIFEST, json.dumps(manifest, sort_keys=True).encode())
                for dict_id, dsha in sorted(dict_ids.items()):
                    _add(tar, f"dicts/{dsha}.zdict", blobs.load_dict(conn, dict_id).data)
                for sha, _, _, _, data, _ in _blob_pages(conn, shas):
                    if codec.sha256_hex(data) != blob_meta[sha]["stored_sha256"]:
                        raise IntegrityError(f"blob {sha} changed during export")
                    _add(tar, f"blobs/{sha}.zst", data)
                tar.close()
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    n_ok = sum(e["status"] == "ok" for e in entries)
    return {"path": str(path), "artifacts": n_ok, "failures": len(entries) - n_ok, "blobs": len(shas),
            "triton_entries": len(tritons), "bytes": path.stat().st_size}


def _triton_of(conn, entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{Triton key: {artifact_key, files}} of the Triton builds among ``entries``: the files of
    each build's entry that its record names (an entry two plan keys share is carried once,
    under the first of them in key order). A build whose entry the store does not hold (a code
    object reused from another plan key, a v2 import) carries none: a host compiles it."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        rec = (e.get("metadata") or {}).get("triton") if e["status"] == "ok" else None
        if not isinstance(rec, dict) or rec.get("key") in out:
            continue
        want = _entry_names(rec)
        have = triton_entries.lookup(conn, rec["key"])
        if want <= set(have):
            out[rec["key"]] = {"artifact_key": e["key"], "files": {f: have[f].blob_sha256 for f in sorted(want)}}
    return out


def _entry_names(rec: dict[str, Any]) -> set[str]:
    """The files of a build's Triton entry (triton_entries.entry_files): metadata, binary, group."""
    return {f"{rec['name']}.json", rec["binary"], f"__grp__{rec['name']}.json"}


def _blob_pages(conn, shas: list[str], page: int = 256):
    for i in range(0, len(shas), page):
        rows = conn.execute(
            select(B.c.sha256, B.c.size, B.c.stored_size, B.c.codec, blob_data, B.c.dict_id)
            .where(B.c.sha256.in_(shas[i:i + page])).order_by(B.c.sha256)
        ).all()
        for sha, size, stored_size, cod, data, dict_id in rows:
            yield sha, size, stored_size, cod, bytes(data), dict_id


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # the bundle's bytes depend on the store's content only
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _is_size(v: Any, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= hi


def _check_date(v: Any, what: str) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= _MAX_TIME:
        raise BundleError(f"{what} must be seconds since the epoch (a number within 0..2**34), got {str(v)[:40]!r}")


def _check_manifest(manifest: Any) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError("not a rocke-aot bundle manifest")
    if manifest.get("version") not in READS:
        raise BundleError(f"bundle format version {manifest.get('version')!r}; this rocke-aot reads "
                          f"{', '.join(map(str, READS))}")
    entries, blob_meta = manifest.get("entries"), manifest.get("blobs")
    if not isinstance(entries, list) or not isinstance(blob_meta, dict):
        raise BundleError("bundle manifest lacks its entries or blobs")
    tritons = manifest.get("triton", {})
    if not isinstance(tritons, dict) or (tritons and manifest["version"] < 3):
        raise BundleError("bundle manifest: malformed triton entries")
    seen: set[str] = set()
    used: set[str] = set()
    for e in entries:
        if not isinstance(e, dict) or e.get("status") not in ("ok", "failed"):
            raise BundleError(f"malformed bundle entry {str(e)[:200]}")
        try:
            key = artifact_key(KeyInputs.from_dict(e))
        except RockeError as err:
            raise BundleError(f"bundle entry {e.get('key')!r} has invalid key inputs: {err}") from None
        if key != e.get("key"):
            raise BundleError(f"bundle entry {e.get('key')!r}: its key inputs hash to {key}; the manifest was altered")
        if key in seen:
            raise BundleError(f"bundle lists key {key} twice")
        seen.add(key)
        if e["status"] == "ok":
            if e.get("blob_sha256") not in blob_meta:
                raise BundleError(f"bundle entry {key} references blob {e.get('blob_sha256')!r}, not in the manifest")
            used.add(e["blob_sha256"])
        elif not isinstance(e.get("error"), str) or not e["error"]:
            raise BundleError(f"bundle failure entry {key} has no error message")
    for tkey, t in tritons.items():
        files = t.get("files") if isinstance(t, dict) else None
        if not isinstance(files, dict) or not all(isinstance(v, str) and v in blob_meta for v in files.values()):
            raise BundleError(f"bundle Triton entry {str(tkey)[:60]!r}: its files are not blobs of the manifest")
        used.update(files.values())
    for e in entries:
        _check_date(e.get("built_at"), f"bundle entry {e['key']}: built_at")
        if e["status"] == "ok":
            try:
                record.check_metadata(e.get("metadata") or {})
                record.check_provenance(e.get("provenance") or {})
            except record.RecordError as err:
                raise BundleError(f"bundle entry {e['key']}: malformed record ({err})") from None
    for sha, m in blob_meta.items():
        if not isinstance(m, dict) or not all(_is_size(m.get(k), MAX_BLOB) for k in ("size", "stored_size")):
            raise BundleError(f"bundle blob {sha!r}: malformed manifest record (sizes must be ints within "
                              f"1..{MAX_BLOB})")
    extra = set(blob_meta) - used
    if extra:
        raise BundleError(f"bundle manifest lists {len(extra)} blobs no entry references")
    return entries, blob_meta


def import_bundle(engine: Engine, blobs: Blobs, path: str | os.PathLike, *, check: CodeCheck | None = None,
                  failures: bool = False, check_entry: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Verify and publish a bundle, all or nothing; returns a summary.

    ``check(code, arch)`` validates each code object for the arch of every entry that uses it
    and returns its resources (metadata["code_object"], replacing the bundle's); it raises a
    RockeError to refuse. ``failures``: also import the bundle's failure records."""
    path = Path(path)
    added = {"artifacts": 0, "failures": 0, "unchanged": 0, "blobs": 0, "failures_skipped": 0, "triton_entries": 0}
    try:
        tar = tarfile.open(path, mode="r:", tarinfo=BoundedTarInfo)
    except (OSError, tarfile.TarError) as e:
        raise BundleError(f"cannot read bundle {path}: {e}") from None
    with tar:
        try:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise BundleError(f"bundle {path} does not start with {MANIFEST}")
            if first.size > MAX_MANIFEST:
                raise BundleError(f"bundle {path}: its manifest is {first.size} bytes, over {MAX_MANIFEST}")
            text = _member_bytes(tar, first)
            manifest = boundedjson.loads(text, MANIFEST_LIMITS, "bundle manifest")
            entered = Entry.imported(codec.sha256_hex(text), path.name)
        except (tarfile.TarError, OSError, ValueError, RecursionError) as e:
            raise BundleError(f"bundle {path}: unreadable manifest ({type(e).__name__}: "
                              f"{boundedjson.cut(str(e))})") from None
        entries, blob_meta = _check_manifest(manifest)
        arches: dict[str, set[str]] = {}  # blob sha256 -> the arches of the entries using it
        for ent in entries:
            if ent["status"] == "ok":
                arches.setdefault(ent["blob_sha256"], set()).add(ent["arch"])
        # the raw bytes of the Triton entries' own files (metadata, group: small), checked after the entries
        wanted_raw = {sha for t in (manifest.get("triton") or {}).values() for sha in t["files"].values()} - set(arches)
        triton_raw: dict[str, bytes] = {}
        resources: dict[tuple[str, str], dict[str, Any]] = {}  # (sha256, arch) -> check's answer
        dicts_meta = manifest.get("dicts") or {}
        if not isinstance(dicts_meta, dict):
            raise BundleError("bundle manifest: malformed dicts")
        try:
            with db.write_tx(engine, exclusive=True) as conn:
                now = time.time()
                seen: set[str] = set()
                zdicts: dict[str, tuple[int, codec.Dictionary]] = {}  # dict sha256 -> (local id, dict)
                while (member := tar.next()) is not None:  # after the manifest, in file order
                    if not member.isfile():
                        raise BundleError(f"bundle {path}: unexpected member {member.name!r}")
                    d = _DICT_RE.match(member.name)
                    if d:
                        zdicts[d.group(1)] = _import_dict(conn, tar, member, d.group(1), dicts_meta, zdicts, now)
                        continue
                    m = _MEMBER_RE.match(member.name)
                    if not m:
                        raise BundleError(f"bundle {path}: unexpected member {member.name!r}")
                    sha = m.group(1)
                    if sha not in blob_meta or sha in seen:
                        raise BundleError(f"bundle {path}: blob {sha} is not in the manifest, or appears twice")
                    meta = blob_meta[sha]
                    if member.size != meta["stored_size"]:
                        raise BundleError(f"bundle blob {sha}: {member.size} bytes, manifest says {meta['stored_size']}")
                    stored = _member_bytes(tar, member)
                    if meta.get("stored_sha256") not in (None, codec.sha256_hex(stored)):
                        raise BundleError(f"bundle {path} is tampered or corrupt: blob {sha} stored bytes "
                                          f"do not match the manifest's stored_sha256")
                    dsha = meta.get("dict_sha256")
                    dict_id, zdict = zdicts[dsha] if dsha in zdicts else (None, None)  # noqa: SIM401 - typed: dsha may be None
                    if meta.get("dict_sha256") and zdict is None:
                        raise BundleError(f"bundle blob {sha}: its dictionary {meta['dict_sha256']} is not in the bundle")
                    try:  # codec.decode reads the frame's declared size before decompressing
                        raw = codec.decode(stored, sha, meta["size"], meta.get("codec", codec.CODEC),
                                           meta["stored_size"], zdict)
                    except IntegrityError as e:
                        raise BundleError(f"bundle {path} is tampered or corrupt: {e}") from None
                    if check is not None:
                        for arch in sorted(arches.get(sha, ())):
                            try:
                                resources[(sha, arch)] = check(raw, arch)
                            except RockeError as e:
                                raise BundleError(f"bundle blob {sha} is not a valid code object for {arch}: "
                                                  f"{type(e).__name__}: {e}") from None
                    seen.add(sha)
                    if sha in wanted_raw:
                        triton_raw[sha] = raw
                    added["blobs"] += blobs.publish(conn, sha, raw, stored, meta.get("codec", codec.CODEC),
                                                          dict_id, now)
                if seen != set(blob_meta):
                    raise BundleError(f"bundle {path}: {len(set(blob_meta) - seen)} blobs of the manifest are missing")
                for ent in entries:
                    if ent["status"] != "ok" and not failures:
                        added["failures_skipped"] += 1
                        continue
                    if ent["status"] == "ok" and check is not None:
                        ent = {**ent, "metadata": _with_resources(ent, resources[(ent["blob_sha256"], ent["arch"])])}
                    if ent["status"] == "ok" and check_entry is not None:
                        try:
                            check_entry(ent)
                        except RockeError as err:
                            raise BundleError(f"bundle entry {ent['key']}: {type(err).__name__}: "
                                              f"{str(err)[:300]}") from None
                    _import_entry(conn, ent, added, entered)
                ok = {ent["key"]: ent for ent in entries if ent["status"] == "ok"}
                for tkey, t in sorted((manifest.get("triton") or {}).items()):
                    art = ok.get(t.get("artifact_key"))
                    check_triton(tkey, t, art, triton_raw)
                    assert art is not None, "check_triton refuses an entry that names no artifact"
                    rec = art["metadata"]["triton"]
                    triton_entries.publish_stored(conn, tkey, t["files"], triton_version=rec["triton_version"],
                                                  target=triton_entries.target_name(rec["target"]),
                                                  artifact_key=art["key"], source="build", now=now)
                    added["triton_entries"] += 1
        except tarfile.TarError as e:
            raise BundleError(f"bundle {path}: {e}") from None
        except CacheError as e:
            if isinstance(e, BundleError):
                raise
            raise BundleError(f"bundle {path} conflicts with the store: {e}") from None
    return {"path": str(path), **added}


def check_triton(tkey: str, t: dict[str, Any], art: dict[str, Any] | None, raw: dict[str, bytes]) -> None:
    """Nothing if a bundle's Triton entry is the one the build it names made, else BundleError. ``art``: the bundle's artifact entry it names (None: none);
    ``raw``: the verified bytes of the entry's metadata and group files by sha256."""
    what = f"bundle Triton entry {str(tkey)[:60]}"
    try:
        triton_entries.check_key(tkey)
    except RockeError as e:
        raise BundleError(f"{what}: {e}") from None
    rec = (art or {}).get("metadata", {}).get("triton")
    if art is None or not isinstance(rec, dict) or rec.get("key") != tkey:
        raise BundleError(f"{what} names artifact {str(t.get('artifact_key'))[:64]!r}, which is no Triton build of "
                          f"this key in the bundle")
    files = t["files"]
    name = rec["name"]
    if set(files) != _entry_names(rec):
        raise BundleError(f"{what}: files {sorted(files)[:4]}, the build's record names {sorted(_entry_names(rec))}")
    if files[rec["binary"]] != art["blob_sha256"] or rec["files"].get(rec["binary"]) != art["blob_sha256"]:
        raise BundleError(f"{what}: its binary is not its artifact's code object")
    if files[f"{name}.json"] != rec["files"].get(f"{name}.json"):
        raise BundleError(f"{what}: {name}.json is not the one its artifact's record states")
    meta_bytes, group = raw.get(files[f"{name}.json"]), raw.get(files[f"__grp__{name}.json"])
    if meta_bytes is None or group is None:
        raise BundleError(f"{what}: its metadata or group file is not a blob of the bundle")
    if group != triton_entries.group_bytes([f"{name}.json", rec["binary"]]):
        raise BundleError(f"{what}: __grp__{name}.json does not list exactly {name}.json and {rec['binary']}")
    try:
        meta = json.loads(meta_bytes)
        got = base64.b32encode(bytes.fromhex(meta["hash"])).decode().rstrip("=")
        same = (meta["name"], meta["triton_version"], meta["target"]) == (name, rec["triton_version"], rec["target"])
    except (ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{what}: {name}.json is not Triton's metadata ({type(e).__name__}: {e})") from None
    if got != tkey or not same:
        raise BundleError(f"{what}: {name}.json is of key {got[:16]}..., kernel {meta.get('name')!r}, Triton "
                          f"{meta.get('triton_version')!r}, target {meta.get('target')!r}: not the build's")


def _with_resources(e: dict[str, Any], co: dict[str, Any]) -> dict[str, Any]:
    sent = (e.get("metadata") or {}).get("code_object")
    if "schedule" not in co and isinstance(sent, dict) and sent.get("schedule") is not None:
        # ptxas's schedule needs cuobjdump to read again; the bundle's is kept, its form checked
        # below (aot/codeobject.py record_metadata: the same rule as a publish)
        co = {**co, "schedule": sent["schedule"]}
    md = {**(e.get("metadata") or {}), "code_object": co, "format": co.get("format", "hsaco")}
    try:
        return dict(record.check_metadata(md))
    except record.RecordError as err:
        raise BundleError(f"bundle entry {e['key']}: its record disagrees with its code object ({err})") from None


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of a regular file of the bundle (tarfile gives no reader for any other member)."""
    f = tar.extractfile(member)
    if f is None:
        raise BundleError(f"bundle member {member.name!r} is not a regular file")
    return f.read()


def _import_dict(conn, tar, member, dsha: str, dicts_meta: dict, seen: dict, now: float):
    """Verify a dictionary member and publish it (or find it already stored); -> (local id, dict)."""
    if dsha not in dicts_meta or dsha in seen:
        raise BundleError(f"bundle dictionary {dsha} is not in the manifest, or appears twice")
    if member.size > MAX_DICT:
        raise BundleError(f"bundle dictionary {dsha}: {member.size} bytes, over {MAX_DICT}")
    try:
        zdict = codec.Dictionary(_member_bytes(tar, member), dsha)
    except IntegrityError as e:
        raise BundleError(f"bundle is tampered or corrupt: {e}") from None
    local = conn.execute(select(D.c.id).where(D.c.sha256 == dsha)).scalar()
    if local is None:
        meta = dicts_meta[dsha]
        local = conn.execute(D.insert().values(
            arch=str(meta.get("arch")), family=str(meta.get("family")), sha256=dsha, size=len(zdict.data),
            samples=int(meta.get("samples") or 0), data=zdict.data, created_at=now,
        )).inserted_primary_key[0]
    return local, zdict


def _import_entry(conn, e: dict[str, Any], added: dict[str, int], entered: Entry) -> None:
    inputs = KeyInputs.from_dict(e)
    cur = conn.execute(select(A.c.status, A.c.blob_sha256).where(A.c.key == e["key"])).first()
    base = {
        "key": e["key"], "arch": inputs.arch, "lane": inputs.lane, "profile": inputs.profile, "family": inputs.family,
        "spec_json": inputs.spec_json, "recipe_digest": inputs.recipe_digest,
        "toolchain_json": inputs.toolchain_json, "options_json": inputs.options_json,
        "built_at": float(e["built_at"]) if e.get("built_at") is not None else time.time(),
    }
    if e["status"] == "ok":
        if cur is not None and cur.status == "ok" and cur.blob_sha256 == e["blob_sha256"]:
            added["unchanged"] += 1
            return
        ir = e.get("ir_sha256")
        if not (isinstance(ir, str) and re.match(r"^[0-9a-f]{64}$", ir)):
            raise BundleError(f"bundle entry {e['key']}: malformed ir_sha256 {ir!r}")
        row = {**base, "status": "ok", "blob_sha256": e["blob_sha256"], "ir_sha256": ir,
               "metadata_json": canonical_json(e.get("metadata") or {}),
               "provenance_json": canonical_json(e.get("provenance") or {}),
               "error": None, "log": None, "last_read_at": base["built_at"],
               "entered": entered.how, "entered_json": entered.by_json()}
        artifacts.publish_row(conn, row, replace=False)
        added["artifacts"] += 1
        return
    if cur is not None:  # an artifact wins over an imported failure; a failure is kept as is
        added["unchanged"] += 1
        return
    conn.execute(A.insert().values(**base, status="failed", blob_sha256=None, ir_sha256=None, metadata_json="{}",
                                   provenance_json="{}", error=e["error"], log=str(e.get("log") or ""),
                                   last_read_at=None, entered=entered.how, entered_json=entered.by_json()))
    added["failures"] += 1
