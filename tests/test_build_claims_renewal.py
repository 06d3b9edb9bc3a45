"""Build-claim lease renewal (cache/claims.py renew, aot/builder/run.py _Heartbeat): a key stays
claimed while its compile runs longer than the lease, and only the holder's own leases move. The
lease ends are read from the claims table with sqlite3 (not through the store), and "still claimed"
is what a second builder's claim() answers.

    renew(keys, A)      moves A's expires_at to now + lease; another holder's row is untouched;
                        returns how many rows were A's
    _Heartbeat(A, 1 s lease) over 2.5 s: a second holder B cannot take the key (the control
                        without a heartbeat: B takes it); stopped, the key is B's once the
                        last renewed lease ends
    a renewal that fails is logged and the next one still runs (a missed renewal only risks a
                        duplicate compile)
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from rocke_aot.aot.builder.run import _Heartbeat
from rocke_aot.cache.store import Store


def _expires(path, key: str) -> float:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT expires_at FROM claims WHERE key = ?", (key,)).fetchone()[0]
    finally:
        con.close()


def test_renew_moves_only_the_holder_s_own_leases(tmp_path):
    path = tmp_path / "c.sqlite"
    with Store.open(path) as store:
        t0 = time.time()
        assert sorted(store.claim(["a", "b"], "A", 5.0)) == ["a", "b"]
        assert store.claim(["c"], "B", 5.0) == ["c"]
        assert store.claim(["a"], "B", 5.0) == [] and store.claim(["c"], "A", 5.0) == []  # live leases are kept
        c_before = _expires(path, "c")
        assert t0 + 4.9 <= _expires(path, "a") <= time.time() + 5.0
        assert store.renew_claims(["a", "b", "c", "missing"], "A", 100.0) == 2
        assert _expires(path, "a") >= t0 + 99.9 and _expires(path, "b") >= t0 + 99.9
        assert _expires(path, "c") == c_before


def test_the_heartbeat_keeps_a_long_compile_claimed(tmp_path):
    path, lease = tmp_path / "c.sqlite", 1.0  # renewed every 0.33 s: 0.67 s of slack on a loaded host
    with Store.open(path) as store:
        assert sorted(store.claim(["k", "control"], "A", lease)) == ["control", "k"]
        first_end = _expires(path, "k")
        beat = _Heartbeat(store, "A", lease)
        with beat.lock:
            beat.keys.add("k")  # in flight: renewed every lease / 3
        try:
            time.sleep(2.5)  # two and a half leases
            assert store.claim(["k"], "B", lease) == []  # renewed: still A's
            assert store.claim(["control"], "B", lease) == ["control"]  # not renewed: its lease ended
            assert _expires(path, "k") > first_end + 1.0
        finally:
            beat.stop()
        assert not beat._thread.is_alive()
        time.sleep(lease + 0.1)
        assert store.claim(["k"], "B", lease) == ["k"]  # no heartbeat: free once the last lease ended


def test_a_failed_renewal_is_logged_and_the_next_one_runs(caplog):
    class Flaky:
        def __init__(self):
            self.calls = []

        def renew_claims(self, keys, holder, lease_s):
            self.calls.append((tuple(keys), holder, lease_s))
            if len(self.calls) == 1:
                raise OSError("database is locked")
            return len(keys)

    store, done = Flaky(), threading.Event()
    with caplog.at_level(logging.WARNING, logger="rocke_aot.aot.builder.run"):
        beat = _Heartbeat(store, "A", 0.15)
        with beat.lock:
            beat.keys.update({"y", "x"})
        deadline = time.monotonic() + 10
        while len(store.calls) < 2 and time.monotonic() < deadline:
            done.wait(0.05)
        beat.stop()
    assert store.calls[:2] == [(("x", "y"), "A", 0.15)] * 2
    assert "renewing 2 build claims failed: database is locked" in caplog.text
