"""`rocke-aot select`: the cached kernels that can run a problem, ranked, with every rejection.

    --arch --family --problem JSON|@FILE [--lane ...] [--min-efficiency] [--limit] [--cache]
        ──> Store.open(readonly=True) ──> service.selection.select() (the one helper the
            service and the runner use too) ──> a ranked table, or one JSON document
        nothing accepted and no kernel baked for the problem ──> "no candidate: ... build with
            --problems": the problems file and the `rocke-aot build` command (exit 1), or why
            no spec of the family can run it (Selection.no_candidate)

Bad input (unknown family, arch or lane, a malformed problem) is a SpecError/LaneError:
exit 2 through cli/main.py's one translation point.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_object_arg, json_option, lanes_option
from rocke_aot.errors import SpecError

# The choices, spelled here: importing service.selection (the store's SQL) for them would make
# `select --server` need the [serve] install (variants/selection.py MODELS, service/selection.py
# MEASURED; tests/test_install_roles.py checks they agree).
MODELS = ("auto", "fitted", "hardware", "efficiency")
MEASURED = ("exact", "class", "off")


def problem_text(value: str) -> str:
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            return path.read_text()
        except OSError as e:
            raise SpecError(f"--problem @{path}: cannot read it ({e.strerror})") from None
    return value


@click.command("select")
@arch_option("The device's full target ID, e.g. gfx942:sramecc+:xnack-.", required=True)
@click.option("--family", required=True,
              help="Kernel family (gemm, conv_direct_fwd, conv_dgrad_patch, triton_matmul, ...), or families of one "
                   "operation and problem type, comma-separated, ranked together (gemm,triton_matmul).")
@click.option("--problem", "problem", required=True, metavar="JSON|@FILE",
              help='The problem as JSON, e.g. \'{"m": 4096, "n": 4096, "k": 4096}\', or @file.json.')
@lanes_option(help="Only artifacts of this lane (repeatable).")
@click.option("--min-efficiency", type=click.FloatRange(0.0, 1.0), default=None,
              help="Reject candidates whose tile efficiency is below this (default: no floor).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many accepted rows.")
@cache_option("Cache URL (path, sqlite:///..., postgresql+psycopg://...); opened read-only.")
@click.option("--explain", is_flag=True, help="Also list every rejected candidate with its reason.")
@click.option("--server", default=None, metavar="URL",
              help="Ask a rocke-aot service (POST /v1/select) instead of opening a cache.")
@click.option("--model", type=click.Choice(MODELS), default="auto", show_default=True,
              help="The order: fitted constants, published hardware facts, or tile efficiency "
                   "(auto: the first the arch has).")
@click.option("--measured", type=click.Choice(MEASURED), default="exact", show_default=True,
              help="Rank by recorded times first (rocke-aot measurements): for this problem, also its "
                   "shape class, or off.")
@click.option("--triton-version", default=None, metavar="VERSION",
              help="A Triton family's: only what this Triton version built (the GPU host's Triton, e.g. 3.6.0); "
                   "left out, every version's kernels are listed, each labelled.")
@click.option("--device-wheels", is_flag=True,
              help="Rank the kernels of the installed device wheels (`rocke-aot export --wheel`, pip-installed) "
                   "instead of a cache: each wheel's manifest signature checked against the pinned root key, every "
                   "kernel verified (docs/kpack.md); no network, no cache.")
@click.option("--mirror", "mirrors", multiple=True, metavar="URL",
              help="Rank the signed index of this static mirror (repeatable: tried in order) where there is no "
                   "service: its TUF metadata verified against the pinned root key, every bin read; "
                   "ROCKE_AOT_OFFLINE=1: what this host verified last.")
@click.option("--local", "local", metavar="DIR", default=None,
              help="With --mirror: the client's local store, where the verified metadata is kept "
                   "(default: $ROCKE_AOT_CLIENT_HOME).")
@click.option("--root-key", default=None, metavar="PUB",
              help="With --device-wheels or --mirror: the pinned root public key (default: $ROCKE_AOT_ROOT_KEY).")
@json_option
def select_cmd(arch, family, problem, lanes, min_efficiency, limit, cache_url, explain, server, model,
               measured, triton_version, device_wheels, mirrors, local, root_key, as_json) -> int:
    """Rank the cached kernels of FAMILY that ARCH can run on PROBLEM.

    By estimated time (the "est ms" column, with what bounds it) where the arch has a time
    model: constants fitted on the device (sm_90), else its published hardware facts
    (gfx90a, gfx942, gfx950; variants/hw_facts/). Elsewhere (a fact not public, e.g. gfx1250:
    the header says which) tile efficiency first, then the matrix-unit path, then bytes staged
    per MAC, then occupancy; the key last. Recorded times (rocke-aot measurements) come first
    wherever they apply (the "basis" column: their median in ms, or the model that placed the
    row; a row the model could not estimate says why below the table). For equal specs
    the newest lane wins (per Triton version for a Triton family: --triton-version names the
    host's, and only its builds answer). Each spec is served by its newest complete build (a partial or failed
    rebuild never takes a kernel away). Exit 1 when nothing qualifies; when that is because
    no cached kernel is baked for the problem (a model's layer the default tables lack), it
    prints the `rocke-aot build --problems` command that builds them. docs/selection.md has
    the rule.

    \b
    Example:
        rocke-aot select --arch gfx942:sramecc+:xnack- --family gemm --problem '{"m": 4096, "n": 4096, "k": 4096}'
        rocke-aot select --arch gfx1250 --family conv_dgrad_patch --problem @patch.json --explain --json
        rocke-aot select --arch sm_90 --family gemm,triton_matmul --problem '{"m": 4096, "n": 4096, "k": 4096}'
        rocke-aot select --arch gfx942 --family gemm --problem '{"m": 512, "n": 512, "k": 512}' --device-wheels \\
            --root-key root.key.pub
        rocke-aot select --arch gfx942 --family gemm --problem '{"m": 512, "n": 512, "k": 512}' \\
            --mirror https://cdn.example/rocke --root-key root.key.pub
    """
    text = problem_text(problem)
    if server is not None:
        return _remote(server, arch.id, family, text, [lane.name for lane in lanes] or None, min_efficiency, limit,
                       explain, as_json, model, measured, triton_version)
    from rocke_aot.service.selection import parse_problem, rejection_row, select, select_families

    if device_wheels and (server is not None or cache_url is not None):
        raise SpecError("--device-wheels ranks the installed device wheels: give it without --cache or --server")
    if mirrors and (device_wheels or cache_url is not None):
        raise SpecError("--mirror ranks a mirror's signed index: give it without --cache or --device-wheels")
    problem_value = parse_problem(select_families(family)[0], text)  # bad input before any store is opened
    opened: contextlib.AbstractContextManager
    if mirrors:  # no service: the signed index (with --server, the service answers)
        opened = signed_index(mirrors, root_key, local)
    elif device_wheels:
        opened = _device_wheel_store(root_key)
    else:
        from rocke_aot.cache.store import Store  # (the [serve] install: a --mirror host needs no database)

        opened = Store.open(cache_url, readonly=True)
    with opened as store:
        sel = select(store, arch, family, problem_value, lanes=[lane.name for lane in lanes] or None,
                     min_efficiency=min_efficiency, limit=limit, model=model, measured=measured,
                     triton_version=triton_version)
    if as_json:
        doc = sel.as_dict(explain=explain)
        if explain:  # the rows the service answers (service/selection.py rejection_row), one shape everywhere
            doc["rejected"] = [rejection_row(r) for r in sel.rejected]
        emit_json(doc)
        return 0 if sel.accepted else 1
    click.echo(f"{sel.family} on {sel.target}: {len(sel.accepted)} accepted"
               + (f" (+{sel.beyond_limit} beyond --limit)" if sel.beyond_limit else "")
               + f", {len(sel.rejected)} rejected" + ("" if explain else " (--explain lists them)"))
    click.echo(f"ranked by: {sel.model}" + (f" ({sel.note})" if sel.note else ""))
    _echo_triton(sel.triton_version, sel.triton_versions)
    if sel.accepted:
        click.echo(f"{'#':>3}  {'key':<16} {'lane':<7} {'arch':<24} {'est ms':>8} {'bound':<8} {'basis':<8} "
                   f"{'eff':>7} {'occ':>4} "
                   f"{'vgpr':>5} {'sgpr':>5} {'lds':>7} {'spill':>5}  spec")
    for i, ch in enumerate(sel.accepted, 1):
        c, r = ch.candidate, ch.candidate.resources
        spec = " ".join(f"{k}={v}" for k, v in sorted(c.spec.items()))
        if c.triton_version is not None:  # every row says which Triton built it
            spec = f"triton={c.triton_version} {spec}"
        if "," in sel.family:  # across families: every row says whose kernel it is
            spec = f"[{c.family}] {spec}"
        est = "-" if ch.estimate_ms is None else f"{ch.estimate_ms:.4f}"  # none where no constants
        basis = ch.basis if ch.measured is None else f"{ch.measured.median_ms:.4f}"  # measured ms, or the model
        click.echo(f"{i:>3}  {c.key[:16]} {c.lane.name:<7} {c.arch:<24} {est:>8} {ch.bound or '-':<8} {basis:<8} "
                   f"{ch.efficiency.total:>7.4f} "
                   f"{_n(r.occupancy):>4} {_n(r.vgprs):>5} {_n(r.sgprs):>5} {_n(r.lds_bytes):>7} "
                   f"{_n(r.spills):>5}  {spec}")
    fallbacks: dict[str, int] = {}
    for ch in sel.accepted:
        if ch.fallback is not None:
            fallbacks[ch.fallback] = fallbacks.get(ch.fallback, 0) + 1
    for why, n in fallbacks.items():  # why those rows have no estimate (ranked by efficiency after the rest)
        click.echo(f"no estimate for {n} of {len(sel.accepted)}: {why}")
    schedules: dict[str, int] = {}  # where the hardware estimates' latencies came from (Choice.schedule)
    for ch in sel.accepted:
        if ch.schedule is not None:
            label = ch.schedule + (f" ({ch.schedule_note})" if ch.schedule_note else "")
            schedules[label] = schedules.get(label, 0) + 1
    for label, n in schedules.items():
        click.echo(f"schedule: {label} for {n} of {len(sel.accepted)}")
    if sel.no_candidate is not None:
        _echo_no_candidate(sel.family, sel.no_candidate.as_dict())
    if explain:
        for rej in sel.rejected:
            click.echo(f"  rejected {rej.candidate.key[:16]} {rej.candidate.lane.name:<7} {rej.candidate.arch:<24} "
                       f"{rej.reason}: {rej.detail}")
    return 0 if sel.accepted else 1


def _remote(server, arch, family, text, lanes, min_efficiency, limit, explain, as_json, model, measured,
            triton_version) -> int:
    """The same selection from a service (client/service.py ServiceClient; the base install); the
    server runs select()."""
    from rocke_aot.client.service import ServiceClient

    prob = json_object_arg(text, f"problem (a JSON object of {family} problem fields)")
    with ServiceClient(server, offline=False) as client:  # no local store is opened for a select
        doc = client.select(arch, family, prob, lanes=lanes, min_efficiency=min_efficiency, limit=limit,
                            explain=explain, model=model, measured=measured, triton_version=triton_version)
    if not explain:
        doc.pop("rejected")
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{family} on {arch} ({server}): {len(doc['accepted'])} accepted")
        click.echo(f"ranked by: {doc['model']}" + (f" ({doc['note']})" if doc["note"] else ""))
        _echo_triton(doc["triton_version"], doc["triton_versions"])
        for i, c in enumerate(doc["accepted"], 1):
            spec = " ".join(f"{k}={v}" for k, v in sorted(c["spec"].items()))
            if c["triton_version"] is not None:
                spec = f"triton={c['triton_version']} {spec}"
            if "," in family:
                spec = f"[{c['family']}] {spec}"
            est = "-" if c["estimate_ms"] is None else f"{c['estimate_ms']:.4f}"
            basis = c["basis"] if c["measured_ms"] is None else f"{c['measured_ms']:.4f}"
            click.echo(f"{i:>3}  {c['key'][:16]} {c['lane']:<7} {c['arch']:<24} {est:>8} {c['bound'] or '-':<8} "
                       f"{basis:<10} {c['efficiency']['total']:>7.4f}  {spec}")
        for r in doc.get("rejected", []):
            click.echo(f"  rejected {r['key'][:16]} {r['lane']:<7} {r['arch']:<24} {r['reason']}")
        if doc["no_candidate"] is not None:
            _echo_no_candidate(family, doc["no_candidate"])
    return 0 if doc["accepted"] else 1


def _echo_triton(asked: str | None, versions) -> None:
    """A Triton family's answer: the version asked for, or every version there is (each row says its own)."""
    if asked is not None:
        click.echo(f"Triton {asked} only" + ("" if asked in versions else
                                              f" (the cache holds {', '.join(versions) or 'no Triton build'} here)"))
    elif versions:
        click.echo(f"Triton versions: {', '.join(versions)} (each row says which built it; a GPU host's Triton must "
                   f"equal the builder's: --triton-version picks one)")


def _echo_no_candidate(family: str, nc: dict) -> None:
    """The answer to an empty selection for want of a baked kernel: the two commands that build
    them (write the problems file, then build), or why no spec can run the problem."""
    import json

    if nc["kind"] != "build":
        click.echo(nc["message"])
        return
    baked = nc["baked"]
    what = (f"baked for this problem ({' '.join(f'{k}={v}' for k, v in baked.items())})" if baked
            else "that runs this problem")
    click.echo(f"no candidate: the cache holds no {family} kernel {what}; build with --problems:")
    click.echo(f"  echo '{json.dumps(nc['problems'])}' > problems.json")
    click.echo(f"  {nc['command']}")


def _n(v) -> str:
    return "-" if v is None else str(v)


@contextlib.contextmanager
def signed_index(mirrors, root_key, local):
    """The signed index of the mirrors (client/index.py): the metadata python-tuf verifies against
    the pinned root key, from the first mirror whose metadata passes (ROCKE_AOT_OFFLINE=1: what
    this host verified last), every bin read; the very select the service runs ranks it."""
    from rocke_aot.client import Fetcher, LocalStore, sources_from
    from rocke_aot.client.fetch import env_offline
    from rocke_aot.client.index import SignedIndex
    from rocke_aot.client.trusted import pinned_key
    from rocke_aot.errors import TrustConfigError

    if pinned_key(root_key) is None:
        raise TrustConfigError("--mirror ranks the signed index: it needs the pinned root key (--root-key or "
                               "$ROCKE_AOT_ROOT_KEY)")
    offline = env_offline()
    with Fetcher([] if offline else sources_from(None, mirrors), LocalStore(local), root_key=root_key,
                 offline=offline) as f:
        yield SignedIndex(f)


@contextlib.contextmanager
def _device_wheel_store(root_key):
    """A temporary store of every installed device wheel's kernels, each wheel's bundle manifest
    signature verified against the pinned root key and every kernel checked (cache/kpack.py
    import_kpack with aot's code-object validation) before it is ranked."""
    import tempfile

    from rocke_aot.aot.codeobject import validate
    from rocke_aot.cache import kpack
    from rocke_aot.client.device_kernels import DeviceWheelSource, installed_roots, verify_signature
    from rocke_aot.client.trusted import pinned_key
    from rocke_aot.errors import NotFoundError, SignatureError, TrustConfigError
    from rocke_aot.targets import Target

    key = pinned_key(root_key)
    if key is None:
        raise TrustConfigError("--device-wheels needs the pinned root key: --root-key or $ROCKE_AOT_ROOT_KEY")
    roots = installed_roots()
    if not roots:
        raise NotFoundError("no device wheel is installed (entry-point group rocke_aot.device_kernels)")
    from rocke_aot.cache.store import Store

    with tempfile.TemporaryDirectory(prefix="rocke-wheels-") as tmp, \
            Store.open(f"sqlite:///{Path(tmp) / 'wheels.sqlite'}") as store:
        for root in roots:
            manifest = root / DeviceWheelSource(root).device["manifest"]
            data = manifest.read_bytes()
            stem = manifest.with_suffix("")
            sig, rootdoc = (stem.with_name(stem.name + ext) for ext in (".sig.json", ".root.json"))
            if not sig.exists():
                raise SignatureError(f"device wheel {root.name}: no {sig.name}; its kernels cannot be verified")
            verify_signature(data, sig.read_bytes(), key, rootdoc.read_bytes() if rootdoc.exists() else None)
            kpack.import_kpack(store, manifest, check=lambda code, a: validate(code, Target.parse(a)).as_dict(), data=data)
        yield store
