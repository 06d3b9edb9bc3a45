"""Many processes on one SQLite file: nothing lost, no "database is locked", crash-consistent."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
import traceback

from _pg import code_object, inputs, pg_database, put, store_url  # noqa: F401

from rocke_aot.cache.keys import artifact_key
from rocke_aot.cache.store import Store

N_PROCS, N_OPS = 4, 200
CTX = mp.get_context("fork")


def _bytes_of(i: int) -> bytes:
    """What _worker puts under inputs(i): shared bytes for every 10th op, the op's own otherwise."""
    j = i % 1000
    return code_object(90000 + j) if j % 10 == 0 else code_object(i, size=2048)


def _worker(url: str, p: int, barrier, errors, others_read) -> None:
    try:
        barrier.wait()
        rng = random.Random(p)
        with Store.open(url, touch_interval=0) as s:  # touch on every get: reads write too
            for j in range(N_OPS):
                i = p * 1000 + j
                # Every 10th object has bytes shared by all processes: concurrent dedup.
                data = _bytes_of(i)
                a = put(s, i, data=data)
                assert s.get(a.key).code_object == data
                # Read what another process may have written by now: exactly the bytes it put.
                q = rng.randrange(N_PROCS)
                oi = q * 1000 + rng.randrange(j + 1)
                other = artifact_key(inputs(oi))
                if other in s.lookup_many([other]):
                    assert s.get(other).code_object == _bytes_of(oi), f"bytes of op {oi} (process {q})"
                    if q != p:
                        with others_read.get_lock():
                            others_read.value += 1
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        errors.put(f"process {p}: {traceback.format_exc()}")
        raise


def test_four_processes_put_and_get_lose_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Store.open(url).close()
    barrier, errors, others_read = CTX.Barrier(N_PROCS), CTX.Queue(), CTX.Value("i", 0)
    procs = [CTX.Process(target=_worker, args=(url, p, barrier, errors, others_read)) for p in range(N_PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    msgs = []
    while not errors.empty():
        msgs.append(errors.get())
    assert not msgs, "\n".join(msgs)
    assert [p.exitcode for p in procs] == [0] * N_PROCS
    assert others_read.value > 0  # some reads did see another process's bytes, and checked them
    with Store.open(url) as s:
        keys = [artifact_key(inputs(p * 1000 + j)) for p in range(N_PROCS) for j in range(N_OPS)]
        hits = s.lookup_many(keys)
        assert len(hits) == N_PROCS * N_OPS and all(h.ok for h in hits.values())
        st = s.stats()
        assert st.artifacts == N_PROCS * N_OPS
        assert st.blobs == N_PROCS * N_OPS * 9 // 10 + N_OPS // 10  # shared bytes stored once
        assert s.verify().ok
        for k in random.Random(0).sample(keys, 50):
            assert s.get(k).code_object


def _killed_mid_transaction(url: str, ready_w: int) -> None:
    import rocke_aot.cache.artifacts as artifacts_mod

    with Store.open(url) as s:
        put(s, 1)
        put(s, 2)
        real = artifacts_mod.publish_row

        def hang(conn, row, *, replace):
            # The blob row is written, the write lock is held, the artifact is not: die here.
            os.write(ready_w, b"x")
            time.sleep(600)
            real(conn, row, replace=replace)

        artifacts_mod.publish_row = hang
        put(s, 3)


def _assert_consistent(url: str) -> Store:
    s = Store.open(url, touch_interval=0)
    rep = s.verify()
    assert rep.ok and rep.orphan_blobs == 0, rep.as_dict()
    for a in s.find():
        assert s.get(a.key).code_object
    return s


def test_writer_killed_mid_transaction_leaves_a_consistent_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    r, w = os.pipe()
    proc = CTX.Process(target=_killed_mid_transaction, args=(url, w))
    proc.start()
    assert os.read(r, 1) == b"x"  # the child is inside its write transaction
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    s = _assert_consistent(url)
    st = s.stats()
    assert (st.artifacts, st.blobs) == (2, 2)  # the uncommitted blob row is gone with its transaction
    assert artifact_key(inputs(3)) not in s.lookup_many([artifact_key(inputs(3))])
    t0 = time.monotonic()
    put(s, 3)  # the dead writer's lock is released: a new write goes straight through
    assert time.monotonic() - t0 < 5
    assert s.get(artifact_key(inputs(3))).code_object == code_object(3)
    s.close()


def _put_forever(url: str, start: int, ready_w: int) -> None:
    with Store.open(url) as s:
        os.write(ready_w, b"x")
        i = start
        while True:
            put(s, i, data=code_object(i, size=8192))
            i += 1


def test_writers_killed_at_random_points(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Store.open(url).close()
    rng = random.Random(1)
    for round_ in range(3):
        r, w = os.pipe()
        procs = [CTX.Process(target=_put_forever, args=(url, 10_000 * (round_ * 2 + k), w)) for k in range(2)]
        for p in procs:
            p.start()
        os.read(r, 1), os.read(r, 1)
        time.sleep(0.2 + rng.random() * 0.3)
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
        for p in procs:
            p.join(10)
        with _assert_consistent(url) as s:
            assert s.stats().artifacts > 0


def _same_keys(url: str, p: int, barrier, errors) -> None:
    try:
        barrier.wait()
        with Store.open(url) as s:
            for j in range(60):
                a = put(s, j)  # every process puts the same keys and bytes at the same time
                assert s.get(a.key).code_object == code_object(j)
    except BaseException:  # noqa: BLE001
        errors.put(f"process {p}: {traceback.format_exc()}")
        raise


def test_racing_identical_puts_on_both_backends(store_url):
    # Exercises the conflict paths: ON CONFLICT DO NOTHING for the blob and the artifact row
    # (PostgreSQL runs puts concurrently under a shared advisory lock), idempotent re-put.
    Store.open(store_url).close()
    barrier, errors = CTX.Barrier(3), CTX.Queue()
    procs = [CTX.Process(target=_same_keys, args=(store_url, p, barrier, errors)) for p in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    msgs = []
    while not errors.empty():
        msgs.append(errors.get())
    assert not msgs, "\n".join(msgs)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with Store.open(store_url) as s:
        st = s.stats()
        assert (st.artifacts, st.blobs) == (60, 60)
        assert s.verify().ok
