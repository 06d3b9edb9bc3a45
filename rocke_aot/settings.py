"""Every ROCKE_AOT_* environment variable, with its meaning and default, read in one place.

    SETTINGS                  the registry: one Setting per variable (name, meaning, default, ...)
    raw(name, env=None)       the variable's value or None; an unregistered name is a SettingError
    flag(name, env=None)      a 0/1 switch: unset or "" -> False, "1" -> True, anything else an error
    integer(name, env=None)   a non-negative integer or None; anything else an error
    describe(env=None)        one dict per setting with its current value (secrets shown as "(set)")

Modules name a variable by this module's constant (``settings.HOME``) and read it through
``raw``/``flag``/``integer``; no other module of the product spells a ``ROCKE_AOT_`` name
(tests/test_settings.py scans for one). The one exception is the compile workers' own plugin
files (``aot/compiler/_comgr_handler.py``, ``aot/toolchains/_triton24_worker.py``): they run in
a lane's interpreter, which may not have rocke_aot installed, and read the variable their parent
set for them (the ``internal`` ones here). ``rocke-aot settings`` prints this table.

What a value means (a path, a URL, a lane) is checked where it is used: the lane registry
validates ROCKE_AOT_LANE, the toolchain finders check that a path is an executable file, and so
on. This module only fails closed on names nobody registered and on malformed switches/numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rocke_aot.errors import SettingError


class Setting:
    """One variable. A plain class, not a dataclass or NamedTuple: `rocke-aot fetch`'s warm path
    (cli/entry.py) reads its names from this module, and dataclasses or typing would cost it 8-10 ms."""

    __slots__ = ("name", "meaning", "default", "area", "secret", "internal")

    def __init__(self, name: str, meaning: str, default: str, area: str, secret: bool = False,
                 internal: bool = False):
        self.name = name
        self.meaning = meaning
        self.default = default  # what happens when it is unset, in words
        self.area = area  # the layer or component that reads it
        self.secret = secret  # never printed (tokens)
        self.internal = internal  # set by rocke-aot itself for a child process; not for users

    def __setattr__(self, attr: str, value: object) -> None:
        if hasattr(self, attr):
            raise AttributeError(f"Setting.{attr} is read-only")
        object.__setattr__(self, attr, value)

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"


HOME = "ROCKE_AOT_HOME"
CACHE = "ROCKE_AOT_CACHE"
CACHE_MAX_BYTES = "ROCKE_AOT_CACHE_MAX_BYTES"
LANE = "ROCKE_AOT_LANE"
LLD = "ROCKE_AOT_LLD"
PTXAS = "ROCKE_AOT_PTXAS"
CUOBJDUMP = "ROCKE_AOT_CUOBJDUMP"
COMGR = "ROCKE_AOT_COMGR"
LLVM24_LIB = "ROCKE_AOT_LLVM24_LIB"
LLVM23_LIB = "ROCKE_AOT_LLVM23_LIB"
ROCM_SYSDEPS = "ROCKE_AOT_ROCM_SYSDEPS"
WORKER_ROLE = "ROCKE_AOT_WORKER_ROLE"
SERVER = "ROCKE_AOT_SERVER"
TOKEN = "ROCKE_AOT_TOKEN"
OFFLINE = "ROCKE_AOT_OFFLINE"
SERVE_CACHE = "ROCKE_AOT_SERVE_CACHE"
SERVE_TOKEN_FILE = "ROCKE_AOT_SERVE_TOKEN_FILE"
SERVE_MAX_PUBLISH = "ROCKE_AOT_SERVE_MAX_PUBLISH"
SERVE_HEAD_TIMEOUT_S = "ROCKE_AOT_SERVE_HEAD_TIMEOUT_S"
CLIENT_HOME = "ROCKE_AOT_CLIENT_HOME"
COMGR_LIB = "ROCKE_AOT_COMGR_LIB"
TRITON24_ROLE = "ROCKE_AOT_TRITON24_ROLE"
ROOT_KEY = "ROCKE_AOT_ROOT_KEY"
INSECURE = "ROCKE_AOT_INSECURE"
MIRRORS = "ROCKE_AOT_MIRRORS"
FETCH_WORKERS = "ROCKE_AOT_FETCH_WORKERS"
SERVE_TRUST_DIR = "ROCKE_AOT_SERVE_TRUST_DIR"
SERVE_ROOT_KEY = "ROCKE_AOT_SERVE_ROOT_KEY"
CLIENT_MAX_BYTES = "ROCKE_AOT_CLIENT_MAX_BYTES"
SERVE_ACCESS_LOG = "ROCKE_AOT_SERVE_ACCESS_LOG"
PLUGIN_IMPORT_TIMEOUT_S = "ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S"
SERVE_BODY_TIMEOUT_S = "ROCKE_AOT_SERVE_BODY_TIMEOUT_S"
SERVE_PLAIN_TOKENS = "ROCKE_AOT_SERVE_PLAIN_TOKENS"

SETTINGS: tuple[Setting, ...] = (
    Setting(HOME, "per-user state: registered toolchains, lane environments, the default cache",
            "the user cache dir (platformdirs), e.g. ~/.cache/rocke-aot", "vocabulary (paths), cache"),
    Setting(CACHE, "the cache URL: a path, sqlite:///FILE or postgresql+psycopg://...",
            "$ROCKE_AOT_HOME/cache.sqlite", "cache"),
    Setting(CACHE_MAX_BYTES, "size limit of the cache in stored bytes; least recently read artifacts are "
            "evicted beyond it", "no limit", "cache"),
    Setting(LANE, "the compiler lane when --lane is not given (validated like --lane)",
            "every lane with a toolchain here", "vocabulary (lanes)"),
    Setting(LLD, "the ld.lld executable that links HSACOs", "ld.lld on PATH, else /usr/lib/llvm-*/bin/ld.lld",
            "aot (toolchains)"),
    Setting(PTXAS, "the ptxas executable for sm_90 (an explicit path never falls through)",
            "the ptxas beside this interpreter (.venv/bin/ptxas, the pinned wheel scripts/setup.sh links), else "
            "ptxas on PATH, else /usr/local/cuda/bin/ptxas or /usr/local/bin/ptxas",
            "aot (compiler)"),
    Setting(CUOBJDUMP, "the cuobjdump executable that reads an sm_90 cubin's SASS at build time (ptxas's "
            "schedule, recorded beside its resources: aot/sass.py); it needs nvdisasm beside it or on PATH",
            "this interpreter's venv (.venv/bin/cuobjdump, scripts/setup.sh), else cuobjdump on PATH; none: the "
            "schedule is recorded as unavailable and the model uses its counts", "aot (sass)"),
    Setting(COMGR, "the COMGR library to detect (only this one)", "$ROCM_PATH/lib, /opt/rocm/lib, Debian's",
            "aot (toolchains)"),
    Setting(LLVM24_LIB, "the LLVM 24 AMDGPU code generator library (libtriton_amd_codegen.so)",
            "the llvm24 lane environment's, else this interpreter's triton wheel", "aot (toolchains)"),
    Setting(LLVM23_LIB, "AMD's LLVM 23 library (rocm/bindings/llvm/libLLVM.so) for the llvm23 lane",
            "this interpreter's rocm-bindings-compiler wheel (an explicit path never falls through)", "aot (toolchains)"),
    Setting(ROCM_SYSDEPS, "the folder of the librocm_sysdeps_{z,zstd} forwarding shims libLLVM.so 23 needs",
            "$ROCKE_AOT_HOME/sysdeps", "aot (toolchains)"),
    Setting(SERVER, "the service URL of `rocke-aot fetch` and `publish` (their --server)", "none: --server is "
            "required", "cli"),
    Setting(TOKEN, "the bearer token the HTTP client sends on publish", "no token", "service (client)",
            secret=True),
    Setting(OFFLINE, "1: the HTTP client answers from its local store only, never the network (0 or 1)",
            "0", "service (client)"),
    Setting(CLIENT_HOME, "the slim client's local store of fetched kernels (rocke_aot.client)",
            "$ROCKE_AOT_HOME/client", "client"),
    Setting(CLIENT_MAX_BYTES, "size bound of the client's local store in bytes of code objects: `rocke-aot fetch` "
            "and `client gc` remove the least recently used kernels beyond it (never those the command just "
            "fetched)", "no bound", "client"),
    Setting(ROOT_KEY, "the pinned root public key of signed generations: ed25519:<hex> or a .pub file "
            "(`rocke-aot trust keygen`); every fetched kernel must be listed by metadata it vouches for",
            "none: fetches are refused unless ROCKE_AOT_INSECURE=1", "client (trust)"),
    Setting(INSECURE, "1: with no pinned root key, fetch unsigned kernels as before (prints a warning) (0 or 1)",
            "0: no pinned key is an error", "client (trust)"),
    Setting(MIRRORS, "static mirror URLs `rocke-aot fetch` tries before --server, space-separated (its --mirror); "
            "the Triton remote cache backend's too (with a pinned root key)",
            "none", "cli, client (triton_cache)"),
    Setting(FETCH_WORKERS, "how many kernels the client fetches at once (Fetcher.get_many: one thread and "
            "one kept-alive connection each); 1 fetches one after another",
            "8", "client"),
    Setting(SERVE_CACHE, "the cache URL each service worker opens (set by `rocke-aot serve`)",
            "none: the app refuses to start", "service (app)", internal=True),
    Setting(SERVE_TOKEN_FILE, "the file holding the publish token (set by `rocke-aot serve --token-file`)",
            "none: the service is read-only", "service (app)", internal=True),
    Setting(SERVE_MAX_PUBLISH, "the largest publish body in bytes (set by `rocke-aot serve`)",
            "the service's default", "service (app)", internal=True),
    Setting(SERVE_HEAD_TIMEOUT_S, "seconds a client may take to send a request line and its headers before "
            "the service closes the connection (service/protocol.py)", "10", "service (protocol)"),
    Setting(SERVE_ACCESS_LOG, "1: `rocke-aot serve` logs one access line per request on stderr (method, path, "
            "status, ms); 0: none (its --access-log/--no-access-log)", "1", "cli (serve)"),
    Setting(SERVE_TRUST_DIR, "the directory of signed metadata the service serves and accepts (set by "
            "`rocke-aot serve --trust-dir`)", "none: /v1/trust answers 404", "service (app)", internal=True),
    Setting(SERVE_ROOT_KEY, "the root key a publish of signed metadata is checked against (set by "
            "`rocke-aot serve --root-key`)", "none: publishing signed metadata is refused", "service (app)",
            internal=True),
    Setting(SERVE_BODY_TIMEOUT_S, "seconds a request body may take to arrive whole, received outside the "
            "in-flight slots (service/guard.py); later: 408 and the connection closed", "30", "service (guard)"),
    Setting(SERVE_PLAIN_TOKENS, "1: accept publish tokens over plain HTTP from any client (set by `rocke-aot serve "
            "--allow-plain-tokens`; default: only over TLS or from loopback)", "0", "service (guard)", internal=True),
    Setting(PLUGIN_IMPORT_TIMEOUT_S, "seconds a family plugin's import (its families or lowerers entry "
            "point) may take before it is named a broken plugin (variants/families.py import_entry_point)",
            "20", "variants (families)"),
    Setting(COMGR_LIB, "the COMGR library a COMGR compile worker loads (set by the parent for it)",
            "none: the worker refuses", "aot (compile worker)", internal=True),
    Setting(WORKER_ROLE, "set on an LLVM 23 worker so it never shares a process with llvmlite's LLVM "
            "(the worker spec is the pool's key; nothing reads the value)", "none", "aot (compile worker)",
            internal=True),
    Setting(TRITON24_ROLE, "codegen or assemble: set on an LLVM 24 worker so each role gets its own worker "
            "processes (the worker spec is the pool's key; nothing reads the value)", "none",
            "aot (compile worker)", internal=True),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str) -> Setting:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SettingError(f"{name!r} is not a registered setting (rocke_aot/settings.py lists them)") from None


def raw(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The value of a registered variable, or None when it is unset."""
    get(name)
    return (os.environ if env is None else env).get(name)


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    v = raw(name, env) or ""
    if v not in ("", "0", "1"):
        raise SettingError(f"{name} must be 0 or 1, got {v!r}")
    return v == "1"


def integer(name: str, env: Mapping[str, str] | None = None) -> int | None:
    v = raw(name, env)
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise SettingError(f"{name} must be a non-negative integer, got {v!r}")
    return n


def describe(env: Mapping[str, str] | None = None) -> list[dict[str, object]]:
    env = os.environ if env is None else env
    out: list[dict[str, object]] = []
    for s in SETTINGS:
        value = env.get(s.name)
        shown = None if value is None else ("(set)" if s.secret else value)
        out.append({"name": s.name, "value": shown, "set": value is not None, "default": s.default,
                    "meaning": s.meaning, "area": s.area, "secret": s.secret, "internal": s.internal})
    return out
