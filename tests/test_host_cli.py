"""The GPU host's command line against a real `rocke-aot serve` on loopback (issue 39, items 2 and 4).

    fetch KEY... --from-file F   16-hex prefixes (what select prints) resolve through the service's
                                 listing; the bytes written are the store's; progress on stderr
    fetch --problem ...          select on the server, then fetch what it accepted: the keys are the
                                 ones the service answers to the same POST /v1/select
    a failed source              falls through to the next; the output names it and why
    ambiguous / unknown prefix   exit 2 naming every match / exit 1 NotFoundError
    client ls|du|gc              sizes from the files, least recently used removed first; the bound
                                 ($ROCKE_AOT_CLIENT_MAX_BYTES) applied after a fetch
    read commands                never create what they read: cache stats|ls|verify|gc --cache <typo>,
                                 client ls --local <typo>; a non-database file is one line
    select                       a missing problem field named in one line; --json rejections in the
                                 service's own shape
    build                        planning nothing says so and exits 1
    serve                        says what and where it serves; one access line per request, or none
"""

from __future__ import annotations

import hashlib
import json
import os

import httpx
import pytest
from _service import HTTP_TIMEOUT_S, filled_store, free_port, serve_process, server_output  # noqa: F401
from click.testing import CliRunner

from rocke_aot.cli.main import cli
from rocke_aot.client import Fetcher, LocalStore, ServiceSource
from rocke_aot.client.keys import AmbiguousKeyError

pytestmark = pytest.mark.filterwarnings("ignore::rocke_aot.client.InsecureFetchWarning")
PROBLEM = {"m": 512, "n": 512, "k": 512}


def run(*args, env=None):
    return CliRunner().invoke(cli, list(map(str, args)), prog_name="rocke-aot", env=env)


@pytest.fixture(scope="module")
def server(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("hostcli")
    path = d / "served.sqlite"
    src = filled_store(f"sqlite:///{path}", kernel_bundle[1])
    with serve_process(f"sqlite:///{path}") as (proc, base):
        yield {"base": base, "src": src, "path": path, "proc": proc}
    src.close()


def test_fetch_many_by_prefix_and_from_a_file(server, tmp_path):
    base, src = server["base"], server["src"]
    arts = src.find()[:3]
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"# two kernels\n{arts[1].key[:16]}\n\n{arts[2].key[:16]}  # the third\n")
    out = tmp_path / "out"
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "local", arts[0].key[:16],
            "--from-file", keys_file, "--out-dir", out, "--progress-interval", "0.1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [k["key"] for k in doc["kernels"]] == [a.key for a in arts] and doc["failed"] == []
    for a in arts:  # the bytes written are the builder's, as its store holds them
        data = (out / f"{a.key}.hsaco").read_bytes()
        assert hashlib.sha256(data).hexdigest() == a.sha256 and data == src.get(a.key).code_object
    assert "fetch: 3/3 kernels" in r.stderr  # the last progress line
    # a second run answers from the local store: the same keys, no source named
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "local", arts[0].key[:16], "--json")
    assert json.loads(r.stdout)["kernels"][0]["origin"]["source"] == base
    # -o writes one kernel only
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "local", "--from-file", keys_file,
            "-o", tmp_path / "one.hsaco")
    assert r.exit_code == 2 and "--out-dir" in r.output


def test_unknown_and_ambiguous_prefixes(server, tmp_path):
    base, src = server["base"], server["src"]
    taken = {a.key for a in src.find()}
    nobody = next(p for p in ("0123456789abcdef", "fedcba9876543210") if not any(k.startswith(p) for k in taken))
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "l", nobody)
    assert r.exit_code == 1 and f"no kernel key starts with {nobody}" in r.output and base in r.output
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "l", "ABCDEF12")
    assert r.exit_code == 2 and "lowercase hex" in r.output
    # two kernels kept locally whose keys share 8 digits: an offline fetch by that prefix names both
    local = LocalStore(tmp_path / "l2")
    (local.root / "kernels").mkdir(parents=True)
    pair = ["abcdef01" + "0" * 56, "abcdef01" + "1" * 56]
    for k in pair:
        (local.root / "kernels" / f"{k}.json").write_text("{}")
    with Fetcher([], local, offline=True, insecure=True) as f, pytest.raises(AmbiguousKeyError) as e:
        f.resolve("abcdef01")
    assert all(k in str(e.value) for k in pair)
    r = run("fetch", "--local", local.root, "--insecure", "abcdef01", env={"ROCKE_AOT_OFFLINE": "1"})
    assert r.exit_code == 2 and all(k in r.output for k in pair), r.output


def test_select_then_fetch_takes_what_the_service_accepts(server, tmp_path):
    base = server["base"]
    want = httpx.post(f"{base}/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": PROBLEM,
                                                  "limit": 2}, timeout=HTTP_TIMEOUT_S).json()
    r = run("fetch", "--server", base, "--insecure", "--local", tmp_path / "l", "--arch", "gfx942", "--family", "gemm",
            "--problem", json.dumps(PROBLEM), "--limit", "2", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["kernels"]
    assert [k["key"] for k in got] == [c["key"] for c in want["accepted"]] and len(got) == 2
    assert [k["sha256"] for k in got] == [c["sha256"] for c in want["accepted"]]
    r = run("fetch", "--insecure", "--local", tmp_path / "l", "--arch", "gfx942", "--family", "gemm",
            "--problem", json.dumps(PROBLEM))
    assert r.exit_code == 2 and "--server" in r.output


def test_a_failed_source_falls_through_and_is_named(server, tmp_path):
    base, src = server["base"], server["src"]
    a = src.find()[0]
    dead = f"http://127.0.0.1:{free_port()}"
    r = run("fetch", "--mirror", dead, "--server", base, "--insecure", "--local", tmp_path / "l", a.key)
    assert r.exit_code == 0, r.output
    assert f"from {base}" in r.output and f"{dead} failed first: NotFoundError" in r.output
    # the Fetcher: a dead service and one sending other bytes, then the real one: both named, in order
    real = httpx.Client(timeout=HTTP_TIMEOUT_S)

    def tamper(request: httpx.Request) -> httpx.Response:
        got = real.get(str(request.url), headers={"accept-encoding": "identity"})
        body = got.content
        if "/v1/blobs/" in request.url.path:
            body = body[:-1] + bytes([body[-1] ^ 1])
        return httpx.Response(got.status_code, stream=httpx.ByteStream(body))

    evil = ServiceSource(base, http=httpx.Client(transport=httpx.MockTransport(tamper)))
    with Fetcher([ServiceSource(dead, retries=0), evil, ServiceSource(base)], LocalStore(tmp_path / "f"),
                 insecure=True) as f:
        k = f.get(a.key)
    real.close()
    assert k.code_object == src.get(a.key).code_object
    skipped = k.origin["skipped"]
    assert [s["source"] for s in skipped] == [dead, base] and "IntegrityError" in skipped[1]["error"]


def test_client_ls_du_gc_and_the_bound(server, tmp_path):
    base, src = server["base"], server["src"]
    arts = src.find()[:4]
    local = tmp_path / "l"
    r = run("fetch", "--server", base, "--insecure", "--local", local, *[a.key for a in arts])
    assert r.exit_code == 0, r.output
    blobs = local / "blobs"
    sizes = {a.sha256: (blobs / a.sha256).stat().st_size for a in arts}
    for i, a in enumerate(arts):  # arts[0] the least recently used
        os.utime(blobs / a.sha256, (1_000_000 + i, 1_000_000 + i))
    du = json.loads(run("client", "du", "--local", local, "--json").stdout)
    assert du["blobs"] == len(set(sizes)) and du["blob_bytes"] == sum(sizes.values())
    ls = json.loads(run("client", "ls", "--local", local, "--json").stdout)["kernels"]
    assert [e["keys"] for e in ls] == [[a.key] for a in reversed(arts)]  # most recent first
    keep = sizes[arts[2].sha256] + sizes[arts[3].sha256]
    r = run("client", "gc", "--local", local, "--max-bytes", keep, "--json")
    assert r.exit_code == 0, r.output
    assert [e["sha256"] for e in json.loads(r.stdout)["removed"]] == [arts[0].sha256, arts[1].sha256]
    assert sorted(p.name for p in blobs.iterdir()) == sorted([arts[2].sha256, arts[3].sha256])
    assert not (local / "kernels" / f"{arts[0].key}.json").exists()  # the record goes with its blob
    # the bound, applied after a fetch: what this fetch took stays, the least recent others go
    r = run("fetch", "--server", base, "--insecure", "--local", local, arts[0].key,
            env={"ROCKE_AOT_CLIENT_MAX_BYTES": str(sizes[arts[0].sha256])})
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in blobs.iterdir()) == [arts[0].sha256] and "removed 2" in r.stderr
    assert run("client", "gc", "--local", local).exit_code == 2  # no bound given


def test_read_commands_never_create_what_they_read(tmp_path):
    typo = tmp_path / "typo.sqlite"
    for cmd in ("stats", "ls", "verify", "gc", "show"):
        args = ["cache", cmd, "--cache", typo] + (["0" * 64] if cmd == "show" else [])
        r = run(*args)
        assert r.exit_code == 1 and f"no cache at {typo}" in r.output, (cmd, r.output)
        assert not typo.exists()
    notdb = tmp_path / "notes.txt"
    notdb.write_text("not a database\n")
    for cmd in ("stats", "verify"):
        r = run("cache", cmd, "--cache", notdb)
        assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
        assert "CacheAccessError" in r.output and "not an SQLite database" in r.output and str(notdb) in r.output
    assert notdb.read_text() == "not a database\n"
    r = run("client", "ls", "--local", tmp_path / "no-such-local")
    assert r.exit_code == 1 and "no local store" in r.output and not (tmp_path / "no-such-local").exists()


def test_select_names_a_missing_field_and_answers_rejections_as_the_service(server):
    r = run("select", "--cache", server["path"], "--arch", "gfx942", "--family", "gemm", "--problem",
            '{"m": 4096, "n": 4096}')
    assert r.exit_code == 2 and r.output.strip() == "Error: gemm problem: missing the field k (given: m, n)"
    question = {"arch": "gfx942", "family": "gemm", "problem": PROBLEM, "explain": True, "min_efficiency": 0.99}
    service = httpx.post(f"{server['base']}/v1/select", json=question, timeout=HTTP_TIMEOUT_S).json()
    assert service["rejected"]
    for args in (["--cache", server["path"]], ["--server", server["base"]]):
        r = run("select", *args, "--arch", "gfx942", "--family", "gemm", "--problem", json.dumps(PROBLEM),
                "--explain", "--min-efficiency", "0.99", "--json")
        assert r.exit_code in (0, 1), r.output
        mine = json.loads(r.stdout)["rejected"]
        assert mine == service["rejected"], args


def test_build_that_plans_nothing_says_so(tmp_path):
    r = run("build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--where", "block_m=7",
            "--dry-run", "--json", "--cache", tmp_path / "c.sqlite")
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["planned"] == 0
    assert "nothing planned" in r.stderr and "--where block_m=7" in r.stderr


def test_serve_says_where_and_logs_each_request(server, tmp_path):
    for extra, lines in (((), 2), (("--no-access-log",), 0)):
        with serve_process(f"sqlite:///{server['path']}", extra=extra) as (proc, base):
            httpx.get(f"{base}/v1/kernels?limit=1", timeout=HTTP_TIMEOUT_S)
            httpx.get(f"{base}/v1/kernels/{'0' * 64}/meta", timeout=HTTP_TIMEOUT_S)
            proc.terminate()
            proc.wait(timeout=30)
            out = server_output(proc)
        assert f"on {base} (1 worker" in out and str(server["path"]) in out, out
        access = [ln for ln in out.splitlines() if '"GET /v1/kernels' in ln]
        assert len(access) == lines, out
        if lines:
            assert " 200" in access[0] and " 404" in access[1]
