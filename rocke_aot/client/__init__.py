"""rocke_aot.client: what a GPU host needs to fetch, verify, keep and launch kernels.

    local.py     LocalStore: verified kernels as files named by hash (no database)
    sources.py   ServiceSource (rocke-aot serve), MirrorSource (a static tree on any HTTP server)
    trusted.py   Trusted: the pinned root key, the signed metadata accepted, the versions seen
    fetch.py     Fetcher: local store first, then each source in order; nothing unverified is kept
    service.py   ServiceClient: select (POST /v1/select, parsed through answers.py) and publish
    answers.py   the select answer's models (pydantic), shared with the service
    keys.py      unique key prefixes (the 16-hex keys select prints) resolved against what is listed
    triton_cache.py  Triton's remote cache backend

Imports only the vocabulary (boundedjson.py: every JSON read from the network is bounded),
cache/keys.py and cache/codec.py, trust/keys.py and trust/repo.py, variants/contract.py (a
fetched record's launch contract, checked before it is kept or launched), python-tuf, httpx,
zstandard, cryptography and pydantic (the select answer only): not FastAPI, not SQLAlchemy, not
llvmlite, not rocke_aot.aot (tests/test_client_slim.py).
"""

from rocke_aot.client.fetch import Fetcher, OfflineMiss, sources_from
from rocke_aot.client.local import Kernel, LocalStore
from rocke_aot.client.trusted import InsecureFetchWarning, Trusted
from rocke_aot.errors import SourceError


def __getattr__(name: str):
    """MirrorSource, ServiceSource and ServiceClient load httpx/httpcore on first use (a warm
    offline fetch needs neither)."""
    if name in ("MirrorSource", "ServiceSource"):
        from rocke_aot.client import sources

        return getattr(sources, name)
    if name == "ServiceClient":
        from rocke_aot.client.service import ServiceClient

        return ServiceClient
    raise AttributeError(f"module 'rocke_aot.client' has no attribute {name!r}")


__all__ = ["Fetcher", "InsecureFetchWarning", "Kernel", "LocalStore", "MirrorSource",
           "OfflineMiss", "ServiceClient", "ServiceSource", "SourceError", "Trusted", "sources_from"]
