"""Select over the signed index where there is no service: the service's own answer, from a mirror.

    the builder's store (tests/_signed.py: 8 gemm kernels for gfx942) ──trust sign, mirror export──>
        a tree served by a real nginx
    `rocke-aot select --mirror URL --root-key PUB` (client/index.py SignedIndex ranked by
        service/selection.py select)  against  `rocke-aot select --server URL` (a real
        `rocke-aot serve` of the same store, POST /v1/select): per problem, the same accepted
        kernels in the same order with the same efficiency, basis, estimate and resources, and
        the same rejections with the same reasons
    `rocke-aot fetch --mirror URL --problem P --limit 2` (no service): the kernels that select
        accepts, in its order, fetched and verified
    ROCKE_AOT_OFFLINE=1 (nginx gone): the host's verified bins answer the same; so does a process
        that cannot import SQLAlchemy, FastAPI, llvmlite or numpy (the base install's modules)
    a tree signed under another root key, a tampered bin: refused by name, nothing ranked
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from _nginx import nginx, served_dir
from _service import EXE, live_server

PROBLEMS = [{"m": 512, "n": 512, "k": 512}, {"m": 4096, "n": 4096, "k": 4096}, {"m": 96, "n": 200, "k": 72},
            {"m": 1, "n": 1, "k": 1}]
COMMON = ("key", "family", "arch", "lane", "spec", "efficiency", "basis", "estimate_ms", "bound", "fallback",
          "schedule", "schedule_note", "measured_ms", "resources", "generation", "triton_version")


def _select(args: list[str], env: dict) -> tuple[int, dict]:
    p = subprocess.run([EXE, "select", "--arch", "gfx942", "--family", "gemm", "--json", "--explain", *args],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


@pytest.fixture(scope="module")
def tree(signed_world):
    where = served_dir()
    shutil.copytree(signed_world["d"] / "tree", where / "tree")
    yield where / "tree"
    shutil.rmtree(where)


def test_select_over_a_mirror_answers_as_the_service_does(signed_world, tree, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_")}
    env.update(ROCKE_AOT_ROOT_KEY=signed_world["pin"], ROCKE_AOT_CLIENT_HOME=str(tmp_path / "host"))
    answers = []
    with nginx(tree) as mirror, live_server(str(signed_world["d"] / "built.sqlite")) as service:
        for prob in PROBLEMS:
            for extra in ([], ["--limit", "3"], ["--lane", "llvm22", "--min-efficiency", "0.5"]):
                args = ["--problem", json.dumps(prob), *extra]
                rc, svc = _select(["--server", service, *args], env)
                rc2, sig = _select(["--mirror", mirror, *args], env)
                assert rc == rc2, (prob, extra)
                assert [{f: r[f] for f in COMMON} for r in svc["accepted"]] == \
                    [{f: r[f] for f in COMMON} for r in sig["accepted"]], (prob, extra)
                assert svc["rejected"] == sig["rejected"] and svc["no_candidate"] == sig["no_candidate"]
                assert (svc["model"], svc["note"]) == (sig["model"], sig["note"])
                answers.append((args, sig))
        # select-then-fetch with no service: the kernels that select accepts, in its order, verified
        prob = json.dumps(PROBLEMS[0])
        p = subprocess.run([EXE, "fetch", "--mirror", mirror, "--arch", "gfx942", "--family", "gemm", "--problem",
                            prob, "--limit", "2", "--json"], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        want = [r["key"] for r in _select(["--mirror", mirror, "--problem", prob, "--limit", "2"], env)[1]["accepted"]]
        got = json.loads(p.stdout)["kernels"]
        assert [k["key"] for k in got] == want and len(want) == 2
        assert all(k["origin"]["signed"] is True for k in got)
        assert [k["sha256"] for k in got] == [signed_world["store"].get(k).sha256 for k in want]
    assert sum(len(sig["accepted"]) for _, sig in answers) > 0 and any(sig["rejected"] for _, sig in answers)
    n = len(signed_world["store"].find())
    assert all(len(sig["accepted"]) + len(sig["rejected"]) == n for args, sig in answers if len(args) == 2)
    # offline: the bins this host verified answer alike, without the network (nginx is gone)
    for args, sig in answers[:3]:
        rc, again = _select(["--mirror", "http://127.0.0.1:9", *args], {**env, "ROCKE_AOT_OFFLINE": "1"})
        assert again == sig
    # a host of the base install (no database layer, no server, no compiler) ranks it alike
    args, sig = answers[0]
    p = subprocess.run([sys.executable, "-c", BASE, "select", "--arch", "gfx942", "--family", "gemm", "--json",
                        "--explain", "--mirror", "http://127.0.0.1:9", *args],
                       env={**env, "ROCKE_AOT_OFFLINE": "1"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout) == sig, p.stderr


# the modules only the [serve] and [build] installs bring, made unimportable (None in sys.modules)
BASE = ("import sys\nfor m in ('sqlalchemy', 'alembic', 'fastapi', 'starlette', 'uvicorn', 'psycopg', 'llvmlite', "
        "'numpy'):\n    sys.modules[m] = None\nsys.argv[0] = 'rocke-aot'\n"
        "from rocke_aot.cli.main import main\nmain()\n")


def _evil_root(tree, world) -> None:
    shutil.rmtree(tree / "metadata")
    shutil.copytree(world["d"] / "evil", tree / "metadata")


def _tampered_bin(tree, world) -> None:
    """One signed bin's expiry moved a century on, same length (its signature no longer holds)."""
    (p,) = sorted((tree / "metadata").glob("*.bins-*.json"))[-1:]
    data = p.read_bytes()
    i = data.index(b'"expires"')
    j = data.index(b'"20', i)
    p.write_bytes(data[:j] + b'"21' + data[j + 3:])


@pytest.mark.parametrize("attack, error", [(_evil_root, "UnlistedKeyError"), (_tampered_bin, "SignatureError")])
def test_select_over_a_mirror_refuses_what_does_not_verify(signed_world, tmp_path, attack, error):
    where = served_dir()
    try:
        shutil.copytree(signed_world["d"] / "tree", where / "tree")
        attack(where / "tree", signed_world)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_")}
        env.update(ROCKE_AOT_ROOT_KEY=signed_world["pin"], ROCKE_AOT_CLIENT_HOME=str(tmp_path / "host"))
        with nginx(where / "tree") as mirror:
            p = subprocess.run([EXE, "select", "--arch", "gfx942", "--family", "gemm", "--problem",
                                json.dumps(PROBLEMS[0]), "--mirror", mirror], env=env, capture_output=True, text=True,
                               timeout=300)
        assert p.returncode == 1 and f"Error: {error}" in p.stderr and p.stdout == "", p.stderr
    finally:
        shutil.rmtree(where)
