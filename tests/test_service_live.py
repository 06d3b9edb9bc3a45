"""The service as deployed: `rocke-aot serve` (uvicorn, several workers) on loopback, over
SQLite while a real build writes into the same store, and over PostgreSQL through a
read-only role while another connection publishes. Every server is stopped, always."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import secrets
import subprocess
import threading
from urllib.parse import quote

import httpx
import pytest
from _pg import _connect, pg_database, role_url  # noqa: F401
from _service import EXE, HTTP_TIMEOUT_S, filled_store, live_server  # noqa: F401
from prometheus_client.parser import text_string_to_metric_families

from rocke_aot.cache.store import Store
from rocke_aot.variants.selection import STALE


def fetch_all(base: str, arts, rounds: int = 3) -> list[tuple[int, str, str]]:
    """GET every blob (both encodings) and record (status, expected, got sha256), 8 at a time."""
    def one(job):
        a, enc = job
        with httpx.Client(timeout=30) as c:
            r = c.get(f"{base}/v1/kernels/{a.key}", headers={"Accept-Encoding": enc})
            return r.status_code, a.sha256, hashlib.sha256(r.content).hexdigest()  # httpx decodes zstd
    jobs = [(a, enc) for _ in range(rounds) for a in arts for enc in ("zstd", "identity")]
    with cf.ThreadPoolExecutor(8) as ex:
        return list(ex.map(one, jobs))


def metric_sum(base: str, name: str, **labels) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_sqlite_two_workers_serve_while_a_real_build_writes(tmp_path, kernel_bundle):
    url = f"sqlite:///{tmp_path / 'live.sqlite'}"
    filled_store(url, kernel_bundle[1]).close()
    with Store.open(url) as s:
        before = s.find()
    with live_server(url, workers=2) as base:
        build = subprocess.Popen(
            [EXE, "build", "--cache", url, "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22",
             "--where", "block_m=128", "--where", "block_n=128", "--where", "in_dtype=f16",
             "--where", "out_dtype=f32", "--where", "path=fma", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            results = []
            while build.poll() is None:
                results += fetch_all(base, before, rounds=1)
            out, err = build.communicate(timeout=600)
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()
        assert build.returncode == 0, err
        assert results and all(st == 200 and want == got for st, want, got in results)
        with Store.open(url) as s:
            after = s.find()
        assert len(after) > len(before)
        listed, cursor = [], None
        while True:
            page = httpx.get(f"{base}/v1/kernels", params={"limit": 5, **({"cursor": cursor} if cursor else {})}, timeout=HTTP_TIMEOUT_S).json()
            listed += [i["key"] for i in page["items"]]
            if not (cursor := page["next_cursor"]):
                break
        assert listed == sorted(a.key for a in after)  # the new build is served at once
        assert all(st == 200 and w == g for st, w, g in fetch_all(base, after, rounds=1))
        # metrics are summed over both workers (prometheus multiprocess mode)
        served = metric_sum(base, "rocke_http_requests_total", route="/v1/kernels/{key}", status="200")
        assert served == len(results) + 2 * len(after)


@pytest.fixture
def pg_schema(pg_database):
    schema = f"svc_{secrets.token_hex(5)}"
    dbname = pg_database.rsplit("/", 1)[1]
    role = f"rocke_ro_{secrets.token_hex(4)}"
    with _connect(dbname) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield pg_database, schema, role, dbname
    finally:
        with _connect(dbname) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f'DROP OWNED BY "{role}"') if _role_exists(conn, role) else None
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _role_exists(conn, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None


def test_postgresql_read_only_role_serves_while_a_writer_publishes(pg_schema, kernel_bundle):
    base_url, schema, role, dbname = pg_schema
    password = secrets.token_hex(8)
    opts = quote(f"-csearch_path={schema}")
    writer_url = f"{base_url}?options={opts}"
    writer = filled_store(writer_url, kernel_bundle[1])
    with _connect(dbname) as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    ro_url = f"{role_url(base_url, role, password)}?options={opts}"
    arts = writer.find()
    try:
        with live_server(ro_url, workers=2) as base:
            assert httpx.get(base + "/healthz", timeout=HTTP_TIMEOUT_S).json() == {"status": "ok", "backend": "postgresql"}
            # a publish to a read-only server is refused before anything is parsed
            r = httpx.put(f"{base}/v1/kernels/{arts[0].key}", json={}, headers={"Authorization": "Bearer x"}, timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 403 and r.json()["error"] == "ReadOnly"
            stop = threading.Event()
            new_keys: list[str] = []

            def publish_more():  # a builder-like writer on its own connection
                src = writer.get(arts[0].key)
                i = 0
                while not stop.is_set() and i < 20:
                    ins = src.inputs
                    from rocke_aot.cache.keys import KeyInputs

                    k = KeyInputs(ins.arch, ins.lane, ins.profile, ins.family, ins.spec, f"writer-{i}", ins.toolchain,
                                  ins.options)
                    new_keys.append(writer.put(k, src.code_object, ir_sha256=src.ir_sha256, metadata=src.metadata,
                                               provenance={"i": i}).key)
                    i += 1

            t = threading.Thread(target=publish_more)
            t.start()
            try:
                results = fetch_all(base, arts, rounds=2)
            finally:
                stop.set()
                t.join()
            assert all(st == 200 and w == g for st, w, g in results)
            for k in new_keys:
                m = httpx.get(f"{base}/v1/kernels/{k}/meta", timeout=HTTP_TIMEOUT_S).json()
                assert m["sha256"] == arts[0].sha256
            # the writer's artifacts are other generations (other recipe digests): select serves the
            # current one only, and names the others stale when asked to explain
            req = {"arch": "gfx942", "family": "gemm", "problem": {"m": 512, "n": 512, "k": 128}}
            sel = httpx.post(f"{base}/v1/select", json=req, timeout=HTTP_TIMEOUT_S).json()
            assert len(sel["accepted"]) == len(arts) and sel["rejected_count"] == 0
            sel = httpx.post(f"{base}/v1/select", json={**req, "explain": True}, timeout=HTTP_TIMEOUT_S).json()
            assert len(sel["accepted"]) == len(arts) and len(sel["rejected"]) == len(new_keys) == sel["rejected_count"]
            assert {r["key"] for r in sel["rejected"]} == set(new_keys)
            assert all(r["reason"].startswith(STALE) for r in sel["rejected"])
    finally:
        writer.close()


def test_serve_runs_on_the_c_parser_and_loop():
    """`rocke-aot serve` leaves loop and http on uvicorn's "auto"; the hot-fetch p99 goal was met
    on httptools + uvloop (docs/service.md) and missed on h11 + asyncio. A dependency dropped from
    pyproject.toml would silently fall back; this names it."""
    from uvicorn.config import Config

    config = Config(app=lambda scope, receive, send: None)  # the defaults serve passes through
    config.load()
    assert config.http_protocol_class.__module__ == "uvicorn.protocols.http.httptools_impl"
    from rocke_aot.cli.serve import HTTP_PROTOCOL

    bounded = Config(app=lambda scope, receive, send: None, http=HTTP_PROTOCOL)
    bounded.load()  # what serve runs: the same C parser, with bounded heads (service/protocol.py)
    assert issubclass(bounded.http_protocol_class, config.http_protocol_class)
    assert config.get_loop_factory().__module__.split(".")[0] == "uvloop"
