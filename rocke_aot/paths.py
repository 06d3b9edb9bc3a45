"""Where rocke-aot keeps per-user state.

    $ROCKE_AOT_HOME (default: the user cache dir, e.g. ~/.cache/rocke-aot)
    ├── toolchains.json      registered toolchains (lane environments, offline interpreters)
    ├── lanes/<lane>/        virtual environments made by `rocke-aot toolchain install <lane>`
    └── cache.sqlite         the default artifact cache (ROCKE_AOT_CACHE overrides the URL)
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

from rocke_aot import settings

ENV_HOME = settings.HOME


def home() -> Path:
    value = settings.raw(ENV_HOME)
    path = Path(value) if value else Path(platformdirs.user_cache_dir("rocke-aot"))
    path.mkdir(parents=True, exist_ok=True)
    return path
