"""Build claims (cache/claims.py, aot/builder/run.py): overlapping builders compile each key
once, and a claimant killed with SIGKILL frees its keys when its lease ends, or at once to a
builder of the same host that sees its process gone. SQLite and PostgreSQL (tests/_pg.py
store_url)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from _pg import pg_database, store_url  # noqa: F401

from rocke_aot.aot import builder
from rocke_aot.aot.builder.run import compile_count
from rocke_aot.cache import claims
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



_GONE = """
import os, signal, sys
from rocke_aot.cache import claims
from rocke_aot.cache.store import Store
with Store.open(sys.argv[1]) as s:
    me = claims.new_holder("this-host")
    assert s.claim([sys.argv[2]], me, 300.0) == [sys.argv[2]]
    print(me, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_claimant_gone_from_this_host_frees_its_keys_at_once(store_url):
    gone_key, live_key, far_key = "cd" * 32, "ef" * 32, "01" * 32
    with Store.open(store_url) as store:
        p = subprocess.run([sys.executable, "-c", _GONE, store_url, gone_key], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == -signal.SIGKILL, p.stderr
        dead = p.stdout.strip()
        host, pidns, pid, _ = dead.rsplit(":", 3)
        assert host == "this-host" and int(pid) != os.getpid()
        # A live process of this host, and a process of another host with the dead one's PID.
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            live = f"this-host:{pidns}:{sleeper.pid}:00000000"
            assert store.claim([live_key], live, 300.0) == [live_key]
            assert store.claim([far_key], f"other-host:{pidns}:{pid}:00000000", 300.0) == [far_key]
            keys = [gone_key, live_key, far_key]
            # Judged by lease alone (no host given), all three are held for minutes.
            assert store.claimed_by_others(keys, "survivor") == set(keys)
            assert store.claim(keys, "survivor", 30.0) == []
            # A builder of this host: only the gone process's key is free, and it is free now.
            assert store.claimed_by_others(keys, "survivor", "this-host") == {live_key, far_key}
            assert store.claim(keys, "survivor", 30.0, "this-host") == [gone_key]
            assert store.claimed_by_others([gone_key], "another", "this-host") == {gone_key}
        finally:
            sleeper.kill()
            sleeper.wait()
        # The sleeper is gone now too; a claim in another PID namespace's name is not judged.
        assert store.claim([live_key], "survivor", 30.0, "this-host") == [live_key]
        assert not claims.gone(f"this-host:4026530000:{sleeper.pid}:00000000", "this-host") or pidns == "4026530000"
        assert not claims.gone(f"this-host:{sleeper.pid}:00000000", "this-host")  # the old format
