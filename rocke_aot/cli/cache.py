"""`rocke-aot cache stats|ls|show|verify|audit|gc|purge|export|import|train-dicts`: thin commands over Store.

    --cache URL (default: $ROCKE_AOT_CACHE, else the user cache dir) ──> Store.open
    command ──> one Store method ──> text, or one JSON document with --json

Library errors propagate as rocke_aot.errors types; rocke_aot.cli.main.main translates
them (NotFoundError/IntegrityError/... exit 1, SpecError/LaneError exit 2). ``verify``
and ``audit`` (aot/audit.py: re-lower, compare IR) return exit code 1 when they find damage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from rocke_aot.cache.db import resolve_url
from rocke_aot.cache.records import Artifact, GcReport
from rocke_aot.cache.store import Store
from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option, lanes_option
from rocke_aot.errors import NotFoundError, SpecError


@contextlib.contextmanager
def _store(url: str | None, *, readonly: bool = False, create: bool = False) -> Iterator[Store]:
    """The store at ``url``. Only ``import`` creates one (create=True): every other command
    refuses a store that does not exist (NotFoundError naming it, exit 1), so a mistyped
    --cache never reports on, or verifies, an empty database it just made. ``readonly``: the
    read-only commands (stats, ls, show, verify, export, audit) never write."""
    import os

    resolved = resolve_url(url)
    if resolved.startswith("sqlite") and not create:
        path = resolved.split(":///", 1)[1].split("?", 1)[0]
        if path not in ("", ":memory:") and not os.path.isfile(path):
            raise NotFoundError(f"no cache at {path}: `rocke-aot cache` creates none (build into it, or "
                                f"`cache import` a bundle, first)")
    store = Store.open(resolved, readonly=readonly, create=create)
    try:
        yield store
    finally:
        store.close()


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@click.group("cache")
def cache() -> None:
    """Inspect and maintain the content-addressed kernel cache.

    \b
    Example:
        rocke-aot cache stats
        rocke-aot cache ls --arch gfx942 --lane llvm22
        rocke-aot cache --help
    """


@cache.command("stats")
@cache_option()
@json_option
def stats(cache_url: str | None, as_json: bool) -> None:
    """Counts and sizes: artifacts, cached failures, blobs, compression, per arch and lane.

    \b
    Example:
        rocke-aot cache stats
        rocke-aot cache stats --cache postgresql+psycopg://cache@db/rocke --json
    """
    with _store(cache_url, readonly=True) as store:
        s = store.stats().as_dict()
        gens = store.generations()
    s["generations"] = {"total": len(gens), "current": sum(g.current for g in gens),
                        "stale": sum(not g.current for g in gens),
                        "stale_artifacts": sum(g.artifacts for g in gens if not g.current),
                        "served": sum(g.served for g in gens),
                        "shadowed": sum(g.artifacts - g.served for g in gens)}
    if as_json:
        emit_json(s)
        return
    click.echo(f"cache      {s['url']} ({s['backend']}, schema {s['schema_version']})")
    click.echo(f"artifacts  {s['artifacts']}   failures {s['failures']}   blobs {s['blobs']} "
               f"(orphans {s['orphan_blobs']})")
    ratio = f"{s['compression_ratio']:.2f}x" if s["compression_ratio"] else "-"
    g = s["generations"]
    click.echo(f"generations {g['total']} ({g['current']} newest complete per family; {g['served']} artifacts "
               f"served, {g['shadowed']} shadowed by newer builds; `cache ls --generations`, `cache gc --keep N`)")
    click.echo(f"bytes      raw {_human_bytes(s['raw_bytes'])}, stored {_human_bytes(s['stored_bytes'])} ({ratio})"
               + (f", cap {_human_bytes(s['max_bytes'])}" if s["max_bytes"] is not None else ""))
    for row in s["by_arch_lane"]:
        click.echo(f"  {row['arch']:<28} {row['lane']:<8} {row['artifacts']}")


@cache.command("ls")
@arch_option("Only this arch target ID.")
@lanes_option(multiple=False, help="Only this compiler lane.")
@click.option("--family", default=None, help="Only this kernel family.")
@click.option("--status", type=click.Choice(["ok", "failed", "all"]), default="ok", show_default=True,
              help="Artifacts, cached failures, or both.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@cache_option()
@json_option
@click.option("--generations", "show_generations", is_flag=True,
              help="List build generations per (arch, lane, family) instead: newest complete (*) or "
                   "not, with counts (served: what select answers from it).")
def ls(arch, lane, family, status, limit, cache_url, as_json, show_generations) -> None:
    """List artifacts (or cached failures) without loading any code object.

    \b
    Example:
        rocke-aot cache ls --arch gfx942 --family gemm
        rocke-aot cache ls --status failed --json
        rocke-aot cache ls --generations
    """
    if show_generations:
        with _store(cache_url, readonly=True) as store:
            gens = store.generations(arch=arch.id if arch else None, lane=lane.name if lane else None,
                                     family=family)
        if as_json:
            emit_json([g.as_dict() for g in gens])
            return
        for g in gens:
            done = "complete" if g.completed_at is not None else "incomplete"
            click.echo(f"{'*' if g.current else ' '} {g.id[:16]}  {g.arch:<24} {g.lane:<7} {g.family:<18} "
                       f"{g.artifacts:>6} artifacts {g.served:>6} served {g.failures:>5} failures  {done:<10} "
                       f"recipe {g.recipe_digest[:16]}")
        if not gens:
            click.echo("(no generations)", err=True)
        return
    with _store(cache_url, readonly=True) as store:
        rows = store.find(arch=arch.id if arch else None, lane=lane.name if lane else None, family=family,
                          status=status, limit=limit)
    rows.sort(key=lambda r: (r.arch, r.lane, r.family, r.key))  # grouped for reading (find is in key order)
    if as_json:
        emit_json([r.as_dict() for r in rows])
        return
    for r in rows:
        tail = f"{r.size:>8} B  {r.sha256[:12]}" if isinstance(r, Artifact) else f"FAILED: {r.error.splitlines()[0][:60]}"
        click.echo(f"{r.key[:16]}  {r.arch:<24} {r.lane:<7} {r.family:<18} {tail}")
    if not rows:
        click.echo("(no entries)", err=True)


@cache.command("show")
@click.argument("key")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the verified code object to this file.")
@cache_option()
@json_option
def show(key: str, out: Path | None, cache_url, as_json) -> None:
    """Show one entry by key (or a unique prefix of at least 4 hex digits).

    An artifact's code object is read and verified (decompress + sha256) before
    anything is printed; a cached failure shows its error and log.

    \b
    Example:
        rocke-aot cache show 3f2a9c
        rocke-aot cache show 3f2a9c --out kernel.hsaco
    """
    with _store(cache_url, readonly=True) as store:
        full = store.resolve_key(key)
        hit = store.lookup_many([full])[full]
        entry = store.get(full) if hit.ok else store.get_failure(full)
    if out is not None:
        if not isinstance(entry, Artifact):
            raise click.UsageError(f"{full} is a cached failure; it has no code object to write")
        assert entry.code_object is not None, "Store.get returns the artifact with its code object"
        out.write_bytes(entry.code_object)
    d = entry.as_dict()
    if as_json:
        emit_json(d)
        return
    for k, v in d.items():
        click.echo(f"{k:<16} {v}")


@cache.command("verify")
@cache_option()
@json_option
def verify(cache_url, as_json) -> int:
    """Decompress and sha256-check every blob; recompute every key; check every record against
    the record schema; count the artifacts fetched from each server (their origin). Exit 1 on
    damage.

    \b
    Example:
        rocke-aot cache verify
        rocke-aot cache verify --json
    """
    with _store(cache_url, readonly=True) as store:
        report = store.verify()
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(f"checked {report.checked_blobs} blobs, {report.checked_artifacts} entries: "
                   + ("ok" if report.ok else "DAMAGED"))
        for sha, reason in report.corrupt:
            click.echo(f"  corrupt blob {sha}: {reason}")
        for key in report.affected_keys:
            click.echo(f"  affected artifact {key}")
        for key, reason in report.bad_keys:
            click.echo(f"  bad key {key}: {reason}")
        for key, reason in report.bad_records:
            click.echo(f"  bad record {key}: {reason}")
        for source, n in report.origins:
            click.echo(f"  {n} artifacts fetched from {source} (rocke-aot cache purge --origin {source} drops them)")
    return 0 if report.ok else 1


@cache.command("purge")
@click.option("--origin", required=True, metavar="URL",
              help="The server whose artifacts go: every artifact a client fetched from it (cache verify lists them).")
@cache_option()
@json_option
def purge(origin, cache_url, as_json) -> None:
    """Drop the artifacts a client fetched from the server at URL, then their blobs.

    \b
    Example:
        rocke-aot cache purge --origin http://10.0.0.7:8080
        rocke-aot cache purge --origin http://10.0.0.7:8080 --cache ~/.cache/rocke-aot/local.sqlite --json
    """
    with _store(cache_url) as store:
        report = store.purge(origin)
    if as_json:
        emit_json({"origin": origin, **report.as_dict()})
        return
    click.echo(f"dropped {report.artifacts_evicted} artifacts fetched from {origin}, deleted {report.blobs_deleted} "
               f"blobs, freed {_human_bytes(report.bytes_freed)}")


@cache.command("gc")
@click.option("--max-bytes", type=click.IntRange(min=0), default=None,
              help="Also evict least-recently-read artifacts until the stored bytes fit.")
@click.option("--keep", type=click.IntRange(min=0), default=None, metavar="N",
              help="Per (arch, lane, family), keep the best-ranked generation and N more whole; drop the "
                   "rows of older ones that nothing serves (a served kernel is never dropped).")
@cache_option()
@json_option
def gc(max_bytes, keep, cache_url, as_json) -> None:
    """Delete blobs no artifact references; with --keep N, the shadowed rows of generations
    beyond N of history first; with --max-bytes, evict to a size cap.

    \b
    Example:
        rocke-aot cache gc
        rocke-aot cache gc --keep 1
        rocke-aot cache gc --max-bytes 2000000000
    """
    with _store(cache_url) as store:
        gens = store.gc_generations(keep) if keep is not None else None
        report = store.evict(max_bytes) if max_bytes is not None else (gens or store.gc())
    if gens is not None and report is not gens:  # both: one report of everything removed
        report = GcReport(gens.artifacts_evicted + report.artifacts_evicted,
                          gens.blobs_deleted + report.blobs_deleted, gens.bytes_freed + report.bytes_freed,
                          report.stored_bytes_after, gens.generations_dropped)
    dropped = report.generations_dropped
    if as_json:
        emit_json(report.as_dict())
        return
    if keep is not None:
        click.echo(f"dropped {len(dropped)} emptied generations: {', '.join(g[:16] for g in dropped) or '-'}")
    click.echo(f"evicted {report.artifacts_evicted} artifacts, deleted {report.blobs_deleted} blobs, "
               f"freed {_human_bytes(report.bytes_freed)}; {_human_bytes(report.stored_bytes_after)} stored")


@cache.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@arch_option("Only this arch target ID.")
@lanes_option(multiple=False, help="Only this compiler lane.")
@click.option("--family", default=None, help="Only this kernel family.")
@click.option("--no-failures", is_flag=True, help="Leave cached failures out.")
@cache_option()
@json_option
def export(path, arch, lane, family, no_failures, cache_url, as_json) -> None:
    """Write the cache (or a filtered part) to one bundle file with a sha256 manifest.

    \b
    Example:
        rocke-aot cache export gfx942.bundle --arch gfx942
    """
    with _store(cache_url, readonly=True) as store:
        summary = store.export(path, arch=arch.id if arch else None, lane=lane.name if lane else None,
                               family=family, failures=not no_failures)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"wrote {summary['path']}: {summary['artifacts']} artifacts, {summary['failures']} failures, "
               f"{summary['blobs']} blobs, {summary['triton_entries']} Triton cache entries, "
               f"{_human_bytes(summary['bytes'])}")


@cache.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--with-failures", is_flag=True, default=False,
              help="Also import the bundle's cached build failures (builds skip those keys unless --force).")
@click.option("--manifest", "manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="JSON", help="PATH is a kpack (TheRock RFC0008): its rocke.aot.bundle/v1 manifest "
                                   "(`rocke-aot export --kpack`); the kpack must be the file it names beside it.")
@click.option("--root-key", default=None, metavar="PUB",
              help="With --manifest: the pinned root public key (a .pub file or ed25519:<hex>); the manifest's "
                   "signature (<manifest>.sig.json, beside it) must verify, by the root key or a release key of "
                   "<stem>.root.json. Without it the kernels are checked but the signature is not.")
@cache_option()
@json_option
def import_(path, with_failures, manifest, root_key, cache_url, as_json) -> None:
    """Verify every blob of a bundle (hashes, sizes, each code object validated for its arch
    like a publish), then publish it all in one transaction (or nothing). With --manifest, PATH
    is a kpack: its sha256, every kernel's sha256 and size, the ELF arch of each code object and
    the manifest's constraints (key inputs hash to the key, the sidecar fields are the launch
    contract's) are checked for every kernel before any is stored.

    \b
    Example:
        rocke-aot cache import gfx942.bundle --cache /shared/rocke/cache.sqlite
        rocke-aot cache import rocke_aot_gfx942.kpack --manifest rocke_aot_gfx942.json --root-key root.key.pub
    """
    from rocke_aot.aot.codeobject import validate
    from rocke_aot.targets import Target
    from rocke_aot.variants.contract import check_entry

    check = lambda code, arch: validate(code, Target.parse(arch)).as_dict()  # noqa: E731  (a record's arch)
    if manifest is not None:
        _import_kpack(path, manifest, root_key, check, cache_url, as_json)
        return
    with open(path, "rb") as f:
        if f.read(4) == b"KPAK":
            raise SpecError(f"{path} is a kpack archive: give its bundle manifest with --manifest")
    with _store(cache_url, create=True) as store:
        summary = store.import_(path, check=check, failures=with_failures, check_entry=check_entry)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"imported {summary['path']}: {summary['artifacts']} artifacts, {summary['failures']} failures, "
               f"{summary['blobs']} new blobs, {summary['unchanged']} already present, "
               f"{summary['triton_entries']} Triton cache entries"
               + (f", {summary['failures_skipped']} failures left out (--with-failures)"
                  if summary["failures_skipped"] else ""))


@cache.command("train-dicts")
@click.option("--min-samples", type=click.IntRange(min=2), default=64, show_default=True,
              help="Only (arch, family) pairs with at least this many distinct code objects.")
@click.option("--dict-size", type=click.IntRange(min=256), default=16384, show_default=True,
              help="Dictionary size in bytes.")
@cache_option()
@json_option
def train_dicts(min_samples, dict_size, cache_url, as_json) -> None:
    """Train a zstd dictionary per (arch, family) where it pays, and recompress with it.

    A dictionary is adopted only when, counting its own bytes, it shrinks that pair's
    blobs by at least 15%; every recompressed blob is verified before it is written.

    \b
    Example:
        rocke-aot cache train-dicts
        rocke-aot cache train-dicts --min-samples 32 --json
    """
    with _store(cache_url) as store:
        reports = store.train_dictionaries(min_samples=min_samples, dict_size=dict_size)
    if as_json:
        emit_json(reports)
        return
    for r in reports:
        if r["adopted"]:
            click.echo(f"{r['arch']:<24} {r['family']:<18} adopted: ratio {r['ratio_plain']} -> {r['ratio_dict']}, "
                       f"{r['recompressed']} blobs, {_human_bytes(r['bytes_before'])} -> {_human_bytes(r['bytes_after'])}")
        else:
            click.echo(f"{r['arch']:<24} {r['family']:<18} skipped: {r['reason']}")


@cache.command("audit")
@click.option("--sample", type=click.IntRange(min=1), default=None,
              help="Re-lower only this many artifacts (a seeded random sample); default: all.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@cache_option()
@json_option
def audit(sample, seed, cache_url, as_json) -> int:
    """Re-lower stored artifacts with the current code; report IR that differs under the same key.

    Only artifacts stored under the current recipe digest are checked (the others are
    unreachable). An artifact whose IR sha256 differs from its record is a digest hole: the
    key did not move although the code now lowers other IR. Exit 1 on any hole.

    \b
    Example:
        rocke-aot cache audit
        rocke-aot cache audit --sample 200 --json
    """
    with _store(cache_url, readonly=True) as store:
        from rocke_aot.aot.audit import audit as run_audit  # the lowering: [build] only, for this command only

        report = run_audit(store, sample=sample, seed=seed)
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(f"recipe {report.recipe_digest[:16]}...: {report.artifacts} artifacts, {report.same_recipe} "
                   f"under this recipe, {report.checked} re-lowered: " + ("ok" if report.ok else
                                                                        f"{len(report.holes)} DIGEST HOLES, "
                                                                        f"{len(report.unverified)} UNVERIFIED"))
        for h in report.holes:
            got = h.error if h.error and h.current_ir_sha256 else (h.current_ir_sha256 or f"refused ({h.error})")
            click.echo(f"  hole {h.key} {h.family} {h.arch} {h.lane}: stored IR {h.stored_ir_sha256}, now {got}")
        for u in report.unverified[:50]:
            click.echo(f"  unverified {u.key} {u.family} {u.arch} {u.lane}: {u.reason}")
    return 0 if report.ok else 1


def _import_kpack(path: Path, manifest: Path, root_key, check, cache_url, as_json) -> None:
    from rocke_aot.cache import kpack
    from rocke_aot.client.device_kernels import verify_signature
    from rocke_aot.errors import KpackError, SignatureError
    from rocke_aot.trust.keys import public_key

    data = manifest.read_bytes()
    signed_by = None
    if root_key is not None:  # the signature first: nothing of an unsigned manifest is read
        stem = manifest.with_suffix("")
        sig = stem.with_name(stem.name + ".sig.json")
        if not sig.exists():
            raise SignatureError(f"no signature {sig.name} beside {manifest}: the manifest cannot be verified")
        root = stem.with_name(stem.name + ".root.json")
        signed_by = verify_signature(data, sig.read_bytes(), public_key(root_key),
                                     root.read_bytes() if root.exists() else None)
    doc = kpack.loads(data, str(manifest))
    if kpack.kpack_path(manifest, doc).resolve() != path.resolve():
        raise KpackError(f"{manifest} names {doc['kpack']}, not {path.name}")
    with _store(cache_url, create=True) as store:  # an import creates its store (as a bundle import does)
        summary = kpack.import_kpack(store, manifest, check=check, data=data)
    summary["signed_by"] = signed_by
    if as_json:
        emit_json(summary)
        return
    click.echo(f"imported {path.name}: {summary['kernels']} kernels ({summary['artifacts']} new, "
               f"{summary['unchanged']} already present)"
               + (f", manifest signed by {signed_by[:16]}" if signed_by else ", signature NOT checked (--root-key)"))
