"""A Triton remote cache backend over `rocke-aot serve`: a GPU host's Triton compiles what no builder has.

On the GPU host:

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=rocke_aot.client.triton_cache:Backend
    ROCKE_AOT_SERVER=http://cache:8080   ROCKE_AOT_ROOT_KEY=root.key.pub (or ROCKE_AOT_INSECURE=1)
    ROCKE_AOT_MIRRORS="https://cdn/rocke ..."   (optional, with a pinned root key: static mirrors,
                          `rocke-aot mirror export`, tried first; a mirror alone is enough)
    ROCKE_AOT_TOKEN=...   (optional: publish what this host compiles, to the server)

Triton builds a RemoteCacheManager per cache key, and it a Backend(key):

    get(["__grp__K.json"])  then  get(child_paths)          (a compile's lookup; all or nothing)
      entry  = the local record (LocalStore root/triton/<key>.json), else from the first source
               that has it, in order: each mirror's triton/<key>.json, the server's
               GET /v1/triton/{key} (the same document); the signed metadata from the first
               source whose root, index and manifest verify
      checks, each a miss plus a counted, logged event (events(); logger rocke_aot.client.triton_cache):
        "version"     a file of another Triton version than this process runs
        "unsigned"    a pinned root key, and the entry is not a build listed by the signed
                      manifest (a host's publish, or an artifact the manifest does not list), or
                      its files' sha256 are not those the signed record states
        "untrusted"   no pinned root key and not ROCKE_AOT_INSECURE=1 (as every fetch)
        "target"      <kernel>.json names another target than the active driver's
        "binary"      the binary is not an ELF of the target's machine (EM_AMDGPU / EM_CUDA)
        "integrity"   a blob whose bytes do not hash to the sha256 (from the service or on disk)
        "incomplete"  a file asked for that the entry does not hold
        "unreachable" the service cannot be reached (offline: ROCKE_AOT_OFFLINE=1 is local only)
      and once per process, on a miss, when this host's own settings are why (a WARNING):
        "nosource"    neither ROCKE_AOT_SERVER nor ROCKE_AOT_MIRRORS is set (mirrors need a pinned key)
        "env"         Triton's cache-invalidating variables (TRITON_DEFAULT_FP_FUSION, ...) set here,
                      which change every key, and not as the builder set them (recorded with each
                      entry: metadata.triton.env_vars)
      every blob verified (sha256, size), from the first source that has it, kept in the
      LocalStore: the next process answers locally
    put(filename, data)  (a compile's result: Triton writes each file, the group file last)
      buffered per key; on the group file (or an autotuner's <kernel>.autotune.json) the whole
      entry is PUT /v1/triton/{key} when ROCKE_AOT_TOKEN is set ("published"; a refusal is the
      "publish" event, never an error in the host's program)

Never a wrong kernel: anything that does not verify is a miss, and Triton compiles as it would
with no cache. This module imports neither FastAPI nor SQLAlchemy nor the builder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import threading
from collections import Counter
from typing import Any

from rocke_aot import settings
from rocke_aot.client.local import LocalStore, check_sha
from rocke_aot.client.sources import JSON_HEADERS, MirrorSource, ServiceSource, Source, document
from rocke_aot.client.trusted import env_insecure, pinned_key
from rocke_aot.errors import IntegrityError, MalformedAnswerError, NotFoundError, RockeError, SpecError
from rocke_aot.paths import atomic_write

try:  # Triton's base class where Triton is installed (a GPU host); the backend works without it
    from triton.runtime.cache import RemoteCacheBackend as _Base
except ImportError:  # pragma: no cover - a host without Triton never constructs one
    _Base = object

_log = logging.getLogger(__name__)
_EVENTS: Counter = Counter()
_LOCK = threading.Lock()
_EM = {"hip": 224, "cuda": 190}
_KEY_RE = re.compile(r"^[A-Z2-7]{52}$")  # base32 of a sha256, '=' stripped: the keys Triton makes
MAX_ENTRY = 1 << 20  # the JSON record of one entry
_state: dict[str, Any] = {}


def events() -> dict[str, int]:
    """How many times each kind of event happened in this process (hits, misses and why)."""
    with _LOCK:
        return dict(_EVENTS)


def reset_events() -> None:
    with _LOCK:
        _EVENTS.clear()
        _state.pop("said", None)


def _event(kind: str, key: str, detail: str = "", level: int = logging.WARNING) -> None:
    with _LOCK:
        _EVENTS[kind] += 1
    _log.log(level, "triton cache %s %s%s", kind, key, f": {detail}" if detail else "")


def _triton_version() -> str:
    import triton

    return triton.__version__


def _current_target() -> dict[str, Any] | None:
    try:
        from triton.runtime.driver import driver

        t = driver.active.get_current_target()
        return {"backend": t.backend, "arch": t.arch, "warp_size": t.warp_size}
    except Exception:  # noqa: BLE001 - no active driver: the key alone (it hashes the target) decides
        return None


def _once(kind: str, message: str) -> None:
    """A WARNING logged once per process (and counted): why no lookup of this process can hit."""
    with _LOCK:
        seen = _state.setdefault("said", set())
        if kind in seen:
            return
        seen.add(kind)
        _EVENTS[kind] += 1
    _log.warning("triton cache: %s", message)


def _host_env_vars() -> dict[str, str]:
    """The variables this process's Triton hashes into every cache key ({} where none is set)."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return {}
    return {str(k): str(v) for k, v in dict(get_cache_invalidating_env_vars()).items()}


def _builders_env_vars(manifest) -> list[dict[str, str]]:
    """The distinct cache-invalidating variables the builder recorded with its Triton entries
    (metadata.triton.env_vars; an entry from before they were recorded counts as none set)."""
    out: list[dict[str, str]] = []
    for entry in manifest.kernels.values():
        rec = (entry.get("metadata") or {}).get("triton") if isinstance(entry, dict) else None
        if isinstance(rec, dict):
            env = dict(rec.get("env_vars") or {})
            if env not in out:
                out.append(env)
                if len(out) >= 4:
                    break
    return out


def _explain_miss(cfg: _Config) -> None:
    """Say once why lookups miss when this host's own settings make every one miss: no source
    at all, or Triton's cache-invalidating variables set here (they change every key)."""
    if not cfg.sources and not cfg.offline:
        ignored = (f" (${settings.MIRRORS} is set but read only with a pinned root key, ${settings.ROOT_KEY})"
                   if settings.raw(settings.MIRRORS) and cfg.root_key is None else "")
        _once("nosource", f"neither ${settings.SERVER} nor ${settings.MIRRORS} is set{ignored}: only the kernels "
                          f"already in the local store {cfg.store.root} can hit; Triton compiles the rest")
    env = _host_env_vars()
    if env:
        manifest = cfg.manifest_if_read()
        builders = _builders_env_vars(manifest) if manifest is not None else None
        theirs = ("the builder set " + " / ".join(", ".join(f"{k}={v}" for k, v in sorted(b.items())) or "none"
                                                  for b in builders)) if builders else \
            "the builder records its own with each entry (metadata.triton.env_vars)"
        if builders is None or env not in builders:
            _once("env", f"this process sets Triton's cache-invalidating "
                         f"{', '.join(f'{k}={v}' for k, v in sorted(env.items()))}; Triton hashes them into every "
                         f"cache key, so a kernel built without the same settings cannot hit ({theirs}); unset "
                         f"them to use the prebuilt kernels")


def _group_bytes(children: list[str]) -> bytes:
    return json.dumps({"child_paths": sorted(children)}).encode()


class _Config:
    """The host's configuration, read once per process (settings: ROCKE_AOT_*)."""

    def __init__(self) -> None:
        self.server = settings.raw(settings.SERVER)
        self.token = settings.raw(settings.TOKEN)
        self.offline = settings.flag(settings.OFFLINE)
        self.root_key = pinned_key(None)
        self.insecure = self.root_key is None and env_insecure()
        self.store = LocalStore()
        self.source = ServiceSource(self.server) if self.server else None  # publishes go here
        # mirrors are read through the signed manifest only: without a pinned key they are not asked
        mirrors = (settings.raw(settings.MIRRORS) or "").split() if self.root_key is not None else []
        self.sources: list[Source] = [MirrorSource(m) for m in mirrors] + ([self.source] if self.source else [])
        self._accepted = None
        self.lock = threading.Lock()

    def manifest_if_read(self):
        """The signed manifest when this process has already accepted one, else None (no request)."""
        return self._accepted.manifest if self._accepted is not None else None

    def manifest(self):
        """The signed metadata (client/trusted.py: TUF's refresh through python-tuf), once: from
        the first source whose metadata verifies (offline: what this host verified last).
        ``.kernel(key)`` answers the signed record of a kernel (its bin only is fetched)."""
        from rocke_aot.client.trusted import Trusted

        with self.lock:
            if self._accepted is None:
                trusted = Trusted(self.root_key, self.store.trust_dir)
                if self.offline or not self.sources:
                    self._accepted = trusted.cached()
                else:
                    first: RockeError | None = None
                    for src in self.sources:
                        try:
                            self._accepted = trusted.refresh(src)
                            break
                        except RockeError as e:
                            first = first or e
                    else:
                        raise first  # type: ignore[misc]
            return self._accepted


def config() -> _Config:
    with _LOCK:
        if "config" not in _state:
            _state["config"] = _Config()
        return _state["config"]


def reset_config() -> None:
    """Forget the configuration (a test changes the environment)."""
    with _LOCK:
        _state.pop("config", None)
        _state.pop("said", None)


class Backend(_Base):
    """Triton's RemoteCacheBackend for one cache key (see the module doc)."""

    def __init__(self, key: str):
        self.key = key
        self.cfg = config()
        self._entry: dict[str, Any] | None = None
        self._puts: dict[str, bytes] = {}

    # ------------------------------------------------------------------ lookups

    def _record_path(self):
        return self.cfg.store.root / "triton" / f"{self.key}.json"

    def _load_entry(self) -> dict[str, Any] | None:
        if self._entry is not None:
            return self._entry
        try:
            self._entry = json.loads(self._record_path().read_text())
            return self._entry
        except (OSError, ValueError):
            pass
        if self.cfg.offline or not _KEY_RE.match(self.key):  # the key goes into a URL: Triton's shape only
            return None
        for src in self.cfg.sources:
            try:
                # the service answers a host's entry only to its own tenant (service/triton.py): the token
                # goes to the service it publishes to, never to a mirror
                own = src is self.cfg.source and self.cfg.token
                ans = src.call("GET", src.triton_path(self.key), MAX_ENTRY,
                               {**JSON_HEADERS, "Authorization": f"Bearer {self.cfg.token}"} if own else JSON_HEADERS)
            except NotFoundError:
                continue
            except RockeError as e:  # down, a redirect, over the bound, past the deadline (client/sources.py Wire)
                _event("unreachable", self.key, f"{src.url}: {e}")
                continue
            try:
                entry = document(ans, f"the Triton entry {self.key}")  # identity encoding, JSON, an object
                files = entry["files"]
                assert isinstance(files, dict) and entry["key"] == self.key
                for f in files.values():
                    check_sha(f["sha256"])  # before it names a blob URL
                    assert isinstance(f["size"], int) and not isinstance(f["size"], bool) and f["size"] >= 0
            except (MalformedAnswerError, SpecError, KeyError, AssertionError, TypeError):
                _event("integrity", self.key, f"{src.url}'s entry record is malformed")
                return None
            self._entry = entry
            return entry
        return None

    def _trusted(self, entry: dict[str, Any]) -> bool:
        files = entry["files"]
        if self.cfg.root_key is None:
            if not self.cfg.insecure:
                _event("untrusted", self.key, "no pinned root key (ROCKE_AOT_ROOT_KEY) and ROCKE_AOT_INSECURE is not 1")
                return False
            return True
        arts = {f["artifact_key"] for f in files.values()}
        if len(arts) != 1 or None in arts:
            _event("unsigned", self.key, "the entry is no build's (a host published it): no signature vouches for it")
            return False
        try:
            manifest = self.cfg.manifest()
        except RockeError as e:
            _event("unsigned", self.key, f"the signed metadata did not verify: {e}")
            return False
        try:
            signed = manifest.kernel(arts.pop())
        except RockeError as e:
            _event("unsigned", self.key, f"the signed metadata of this entry's artifact did not verify: {e}")
            return False
        rec = (signed or {}).get("metadata", {}).get("triton") if isinstance(signed, dict) else None
        if not rec or rec.get("key") != self.key:
            _event("unsigned", self.key, "the signed manifest does not list this entry's artifact")
            return False
        want = dict(rec["files"])
        name = rec["name"]
        want[f"__grp__{name}.json"] = hashlib.sha256(_group_bytes(list(rec["files"]))).hexdigest()
        if {f: v["sha256"] for f, v in files.items()} != want:
            _event("unsigned", self.key, "the entry's files are not the ones the signed record states")
            return False
        return True

    def _blob(self, sha: str, size: int) -> bytes | None:
        try:
            return self.cfg.store.blob(sha, size)
        except (NotFoundError, IntegrityError):
            pass
        if self.cfg.offline:
            return None
        for src in self.cfg.sources:  # the first that sends the bytes of this sha256 and size
            try:
                data = src.blob(sha, size)  # verified: sha256 and size
            except NotFoundError:
                continue
            except IntegrityError as e:
                _event("integrity", self.key, f"{src.url}: {e}")
                continue
            except RockeError as e:
                _event("unreachable", self.key, f"{src.url}: {e}")
                continue
            self.cfg.store.put_blob(sha, size, data)
            return data
        return None

    def _check_files(self, entry: dict[str, Any], got: dict[str, bytes]) -> bool:
        version = _triton_version()
        for f, info in entry["files"].items():
            if info["triton_version"] != version:
                _event("version", self.key, f"{f} is Triton {info['triton_version']}'s, this process runs {version}")
                return False
        for f, data in got.items():
            if f.endswith(".json") and not f.startswith("__grp__") and not f.endswith(".autotune.json"):
                try:
                    meta = json.loads(data)
                    target = meta["target"]
                except (ValueError, KeyError, TypeError):
                    _event("integrity", self.key, f"{f} is not Triton's metadata")
                    return False
                if meta.get("triton_version") != version:
                    _event("version", self.key, f"{f} was written by Triton {meta.get('triton_version')}")
                    return False
                here = _current_target()
                if here is not None and {k: target.get(k) for k in here} != here:
                    _event("target", self.key, f"{f} is for {target}, this device is {here}")
                    return False
                binary = got.get(f"{meta.get('name')}.{'hsaco' if target.get('backend') == 'hip' else 'cubin'}")
                if binary is not None:
                    machine = int.from_bytes(binary[18:20], "little") if binary[:4] == b"\x7fELF" else None
                    if machine != _EM.get(target.get("backend")):
                        _event("binary", self.key, f"the binary is ELF machine {machine}, not the target's")
                        return False
        return True

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        try:
            return self._get(list(filenames))
        except Exception as e:  # noqa: BLE001 - never break the host's compile: a miss
            _event("error", self.key, f"{type(e).__name__}: {e}")
            return {}

    def _get(self, filenames: list[str]) -> dict[str, bytes]:
        entry = self._load_entry()
        if entry is None:
            _event("miss", self.key, level=logging.INFO)
            _explain_miss(self.cfg)
            return {}
        files = entry["files"]
        missing = [f for f in filenames if f not in files]
        if missing:
            _event("incomplete", self.key, f"the entry holds no {missing}")
            return {}
        if not self._trusted(entry):
            return {}
        # the whole entry: its metadata is checked whichever file Triton asks for first
        got = {}
        for f, info in files.items():
            data = self._blob(info["sha256"], info["size"])
            if data is None:
                return {}
            got[f] = data
        if not self._check_files(entry, got):
            return {}
        path = self._record_path()
        if not path.exists():
            atomic_write(path, json.dumps(entry, sort_keys=True).encode())
        _event("hit", self.key, ", ".join(filenames), level=logging.INFO)
        return {f: got[f] for f in filenames}

    # ------------------------------------------------------------------ publishing

    def put(self, filename: str, data: bytes) -> None:
        self._puts[filename] = bytes(data)
        if filename.startswith("__grp__") or filename.endswith(".autotune.json"):
            files = self._puts if filename.startswith("__grp__") else {filename: self._puts[filename]}
            self._publish(dict(files))

    def _publish(self, files: dict[str, bytes]) -> None:
        cfg = self.cfg
        if not cfg.token or cfg.source is None or cfg.offline:
            return
        body = {"triton_version": _triton_version(),
                "files": {f: base64.b64encode(d).decode() for f, d in sorted(files.items())}}
        try:  # the one bounded exchange: deadline, no redirects, the answer's size bounded
            cfg.source.call("PUT", f"/v1/triton/{self.key}", MAX_ENTRY,
                            {**JSON_HEADERS, "Authorization": f"Bearer {cfg.token}"}, json_body=body)
        except RockeError as e:
            _event("publish", self.key, f"{type(e).__name__}: {e}")
            return
        _event("published", self.key, ", ".join(sorted(files)), level=logging.INFO)


__all__ = ["Backend", "config", "events", "reset_config", "reset_events"]
