"""Build claims (cache/claims.py, aot/builder/run.py): overlapping builders compile each key
once, and a claimant killed with SIGKILL frees its keys when its lease ends. SQLite and
PostgreSQL (tests/_pg.py store_url)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from _pg import pg_database, store_url  # noqa: F401

from rocke_aot.aot import builder
from rocke_aot.aot.builder.run import compile_count
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

WHERE = {"block_m": "64", "block_n": "64", "in_dtype": "f16", "out_dtype": "f32", "path": "fma"}


def test_overlapping_builders_compile_each_key_once(store_url, llvm22):
    summaries, errors = [], []
    start = threading.Barrier(3)

    def one():
        try:
            with Store.open(store_url) as store:
                start.wait()
                summaries.append(builder.build(arches=[Target.parse("gfx942")], families=["gemm"],
                                               lanes=[get_lane("llvm22")], store=store, toolchains=[llvm22],
                                               where=WHERE, jobs=1))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    before = compile_count()
    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    compiles = compile_count() - before
    with Store.open(store_url) as store:
        stored = store.find(family="gemm")
    assert len(stored) == 8
    # Three builders planned the same 8 keys: 8 compiles in all (without claims: up to 24).
    assert compiles == 8, [s["compiles"] for s in summaries]
    assert sum(s["built"] for s in summaries) == 8
    assert sum(s["built"] + s["built_by_others"] + s["cached"] for s in summaries) == 24
    assert all(s.ok for s in summaries)


_HOLDER = """
import os, signal, sys
from rocke_aot.cache.store import Store
with Store.open(sys.argv[1]) as s:
    assert s.claim([sys.argv[2]], "doomed", float(sys.argv[3])) == [sys.argv[2]]
    print("claimed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # dies mid-"compile": no release, no renewal
"""


def test_a_claimant_killed_mid_compile_frees_its_key(store_url):
    key = "ab" * 32
    with Store.open(store_url) as store:
        p = subprocess.run([sys.executable, "-c", _HOLDER, store_url, key, "2.0"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == -signal.SIGKILL and "claimed" in p.stdout, p.stderr
        t0 = time.time()
        assert store.claim([key], "survivor", 30.0) == []  # the dead one's lease still runs
        assert store.claimed_by_others([key], "survivor") == {key}
        while store.claim([key], "survivor", 30.0) != [key]:
            assert time.time() - t0 < 10, "the lease of a killed claimant never ended"
            time.sleep(0.1)
        assert store.claimed_by_others([key], "another") == {key}
        assert store.release_claims([key], "survivor") == 1
        assert store.claim([key], "another", 30.0) == [key]

