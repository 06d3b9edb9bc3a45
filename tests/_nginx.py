"""A real nginx (Debian's package) serving a directory on a loopback port, unprivileged.

    served_dir()            a fresh world-readable directory under /tmp (pytest's own tmp dirs
                            are 0700 to root, which an unprivileged nginx cannot read)
    nginx(root, extra="") -> base URL   nginx -c <temp config> -e stderr in the foreground, as the calling
                            user, or as `nobody` (setpriv) when the tests run as root; no access
                            log, every temp path in its own directory; stopped on exit; ``host``
                            and ``netns``: listen on that address inside that network namespace
                            (bench/bench_mirror.py's network path), loopback by default

The config says what a static mirror needs and nothing else: files under ``root``, octet-stream
by default, JSON for the metadata, no caching of open files (a test rewrites files in place);
``extra`` is added to the server block (a test's hostile behaviour, e.g. a limit_rate).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from _service import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def served_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="rocke-nginx-", dir="/tmp"))
    d.chmod(0o755)
    return d


def _conf(work: Path, root: Path, host: str, port: int, workers: int, extra: str) -> Path:
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes {workers};
daemon off;
pid {work}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    types {{ application/json json; }}
    default_type application/octet-stream;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen {host}:{port};
        root {root};
        location = /healthz {{ return 200 "ok"; }}
        {extra}
    }}
}}
""")
    return conf


@contextlib.contextmanager
def nginx(root: Path, *, workers: int = 1, extra: str = "", host: str = "127.0.0.1", netns: str | None = None):
    """Yield the base URL of nginx serving ``root`` (which the nginx user must be able to read)."""
    work = Path(tempfile.mkdtemp(prefix="rocke-nginx-work-", dir="/tmp"))
    port = free_port()
    argv = [NGINX, "-e", "stderr", "-p", str(work), "-c", str(_conf(work, root, host, port, workers, extra))]
    if os.geteuid() == 0:  # never serve as root: drop to nobody, which owns only the work dir
        shutil.chown(work, "nobody", "nogroup")
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    if netns is not None:  # `ip netns exec` enters the namespace and execs: proc is nginx itself
        argv = ["ip", "netns", "exec", netns, *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"nginx exited {proc.returncode}: {proc.stdout.read()}")
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("nginx did not answer within 20 s")
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        shutil.rmtree(work, ignore_errors=True)
