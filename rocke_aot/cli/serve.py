"""`rocke-aot serve`: run the artifact service (service/app.py) under uvicorn.

    --cache URL ──> ROCKE_AOT_SERVE_CACHE ─┐
    --token-file F ──> ROCKE_AOT_SERVE_TOKEN_FILE ─┼─> uvicorn "rocke_aot.service.app:app_from_env" (factory)
    --workers N>1 ──> PROMETHEUS_MULTIPROC_DIR = a fresh temp dir (metrics summed over workers)

Before binding it says on stderr what it serves, where (the URL), and whether publishing and the
access log are on; the access log (--access-log, $ROCKE_AOT_SERVE_ACCESS_LOG, default on) is one
uvicorn line per request, whatever --log-level says. Every worker process opens its own Store. Binds 127.0.0.1 unless --host says otherwise;
without --token-file the server is read-only (PUT answers 403). uvicorn runs the httptools
parser through service/protocol.py's BoundedHttpTools (request heads bounded in bytes and
in time, connections per worker and per client address bounded, idle ones closed first when
full); keep-alive idle connections close after 5 s. --tls-cert/--tls-key serve HTTPS; publish
tokens are refused over plain HTTP except from loopback (--allow-plain-tokens lifts it).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile

import click

from rocke_aot import settings
from rocke_aot.cache.db import display_url, resolve_url
from rocke_aot.cli.options import cache_option
from rocke_aot.errors import SpecError
from rocke_aot.trust.keys import public_key

HTTP_PROTOCOL = "rocke_aot.service.protocol:BoundedHttpTools"  # an import string: workers are spawned


@click.command("serve")
@cache_option(f"Store to serve: a path, sqlite:///FILE or postgresql+psycopg://... (default: ${settings.CACHE}).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (loopback unless told).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256), help="Worker processes.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File holding the publish bearer token; without it PUT /v1/kernels/{key} is refused (403).")
@click.option("--max-publish-bytes", type=click.IntRange(1024, 1 << 30), default=None,
              help="Largest publish request body (default 16 MiB).")
@click.option("--create", is_flag=True, default=False,
              help="Create an empty store when the cache does not exist yet (a fresh volume); without it a "
              "missing cache is an error, so a mistyped path never serves an empty store.")
@click.option("--trust-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of the signed metadata served at /v1/trust/ (`rocke-aot trust sign -o`); with "
              "--token-file and --root-key, PUT /v1/trust replaces it after checking every signature.")
@click.option("--root-key", default=None, metavar="PUB",
              help="The root public key (.pub file or ed25519:<hex>) a published signed generation must verify with.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM certificate (chain): serve HTTPS (with --tls-key); publish tokens are then taken over TLS.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM private key of --tls-cert.")
@click.option("--allow-plain-tokens", is_flag=True, default=False,
              help="Accept publish tokens over plain HTTP from any client (default: only over TLS or from "
              "loopback; behind a TLS-terminating proxy on the same host, loopback already qualifies).")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--access-log/--no-access-log", "access_log", default=None,
              help=f"One line per request on stderr: client, method, path, status (default: on; or "
                   f"${settings.SERVE_ACCESS_LOG}=0).")
def serve(cache_url, host, port, workers, token_file, max_publish_bytes, create, trust_dir, root_key,
          tls_cert, tls_key, allow_plain_tokens, log_level, access_log) -> None:
    """Serve the kernel cache over HTTP (FastAPI + uvicorn).

    \b
    Example:
        rocke-aot serve --cache /srv/rocke/cache.sqlite --port 8080 --workers 4
        rocke-aot serve --cache /var/lib/rocke-aot/cache.sqlite --create --host 0.0.0.0 \\
            --tls-cert cert.pem --tls-key key.pem --token-file token
        curl http://127.0.0.1:8080/v1/kernels?arch=gfx942&limit=10
    """
    import uvicorn

    from rocke_aot.service import app as service_app
    from rocke_aot.service.metrics import ENV_MULTIPROC

    if (tls_cert is None) != (tls_key is None):
        raise SpecError("--tls-cert and --tls-key go together")
    url = resolve_url(cache_url)
    if create:
        from rocke_aot.cache.store import Store

        Store.open(url).close()  # creates the schema when missing; an existing store is untouched
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            if not f.read().strip():
                raise SpecError(f"--token-file {token_file} is empty")
    os.environ[settings.SERVE_CACHE] = url
    if token_file is not None:
        os.environ[settings.SERVE_TOKEN_FILE] = os.path.abspath(token_file)
    else:
        os.environ.pop(settings.SERVE_TOKEN_FILE, None)
    if max_publish_bytes is not None:
        os.environ[settings.SERVE_MAX_PUBLISH] = str(max_publish_bytes)
    for name, value in ((settings.SERVE_PLAIN_TOKENS, "1" if allow_plain_tokens else None),
                        (settings.SERVE_TRUST_DIR, trust_dir and os.path.abspath(trust_dir)),
                        (settings.SERVE_ROOT_KEY, root_key and str(public_key(root_key).as_pin()))):
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    service_app.app_from_env().state.store.close()  # open once here: a bad URL fails before binding
    multiproc = None
    if workers > 1 and not os.environ.get(ENV_MULTIPROC):
        multiproc = tempfile.mkdtemp(prefix="rocke-aot-metrics-")
        os.environ[ENV_MULTIPROC] = multiproc
    if access_log is None:
        raw = settings.raw(settings.SERVE_ACCESS_LOG)
        access_log = True if raw in (None, "") else settings.flag(settings.SERVE_ACCESS_LOG)
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    # --log-level for uvicorn's own lines, INFO for the access lines: uvicorn would set both to
    # log_level (hiding every access line at the default "warning"), so it is given none
    log_config["loggers"]["uvicorn"]["level"] = log_config["loggers"]["uvicorn.error"]["level"] = log_level.upper()
    log_config["loggers"]["uvicorn.access"]["level"] = "INFO"
    shown = "[" + host + "]" if ":" in host else host
    scheme = "https" if tls_cert else "http"
    click.echo(f"rocke-aot serve: {display_url(url)} on {scheme}://{shown}:{port} ({workers} worker"
               f"{'s' if workers > 1 else ''}; publish {'on' if token_file else 'off (no --token-file)'}; "
               f"signed metadata {trust_dir or 'none'}; access log {'on' if access_log else 'off'})", err=True)
    try:
        uvicorn.run("rocke_aot.service.app:app_from_env", factory=True, host=host, port=port, workers=workers,
                    log_level=None, access_log=access_log, log_config=log_config, http=HTTP_PROTOCOL,
                    timeout_keep_alive=5, ssl_certfile=tls_cert, ssl_keyfile=tls_key)
    finally:
        if multiproc:
            shutil.rmtree(multiproc, ignore_errors=True)
