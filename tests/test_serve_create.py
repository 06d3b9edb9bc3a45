"""`rocke-aot serve` on a missing cache: refused, unless --create (a fresh Docker volume)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from rocke_aot.cli.main import cli

BIN = Path(sys.executable).parent / "rocke-aot"


def test_a_missing_cache_is_refused_before_binding(tmp_path):
    r = CliRunner().invoke(cli, ["serve", "--cache", str(tmp_path / "nope.sqlite"), "--port", "1"])
    assert r.exit_code == 1 and "never created" in r.output
    assert not (tmp_path / "nope.sqlite").exists()


def test_create_serves_an_empty_store(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "vol" / "cache.sqlite"
    db.parent.mkdir()
    proc = subprocess.Popen([str(BIN), "serve", "--cache", str(db), "--create", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert r.status_code == 200
        listing = httpx.get(f"http://127.0.0.1:{port}/v1/kernels", timeout=5)
        assert listing.status_code == 200 and db.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
