"""rocke_aot.client: what a GPU host needs to fetch, verify, keep and launch kernels.

    local.py     LocalStore: verified kernels as files named by hash (no database)
    sources.py   ServiceSource (rocke-aot serve), MirrorSource (a static tree on any HTTP server)
    fetch.py     Fetcher: local store first, then each source in order; nothing unverified is kept

Imports only the vocabulary, cache/keys.py and cache/codec.py, httpx and zstandard: not
FastAPI, not SQLAlchemy, not llvmlite, not rocke_aot.aot (tests/test_client_slim.py).
"""

from rocke_aot.client.fetch import Fetcher, OfflineMiss, sources_from
from rocke_aot.client.local import Kernel, LocalStore
from rocke_aot.client.sources import MirrorSource, ServiceSource, SourceError

__all__ = ["Fetcher", "Kernel", "LocalStore", "MirrorSource", "OfflineMiss", "ServiceSource", "SourceError",
           "sources_from"]
