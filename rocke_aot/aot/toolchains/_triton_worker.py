"""Worker side of the Triton toolchain (a plugin of aot/compiler/_llvm_worker.py; stdlib + triton only).

It runs under the interpreter of a Triton install (a lane environment such as
$ROCKE_AOT_HOME/lanes/triton-3.6.0-py3.12, made by `rocke-aot toolchain install triton==3.6.0`), on a
machine with no GPU. Triton is driven through its own just-in-time path, so what is compiled and
the cache key it is filed under are the ones a GPU host's Triton computes for the same launch:

    triton.describe   version, Python, sha256 of triton_key() (Triton's own hash of its compiler,
                      backends, language and libtriton), the cache-invalidating environment
                      (must be empty), and per probed target: a trivial kernel compiled for it
                      (ok or the error), the backend's hash, and for HIP the LLVM version the
                      HSACO's linker records in .comment ("Linker: LLD 22.0.0 ...")
    triton.compile    payload {module, function, sys_path, sources: {file: sha256}, target:
                      [backend, arch, warp_size], args: [per parameter, in order], options}
        1. every source file's sha256 must equal the payload's (the plan key hashed them)
        2. import the module (sys_path first), unwrap autotune/heuristics to the JITFunction
        3. triton.runtime.driver.set_active(a stand-in driver naming the target: device 0,
           stream 0); nothing else of a GPU runtime is asked for
        4. knobs.cache: RemoteCacheManager with a recording backend class, a temporary dir
        5. fn.warmup(*args, grid=(1,), **options): Triton's binder specializes the arguments
           exactly as on a GPU host (pointers: 16-byte aligned, "within 2 GiB" on AMD; ints:
           == 1 becomes a constexpr, % 16 == 0 a divisibility attribute), parses the options,
           computes get_cache_key(...) and compiles; every file it writes goes through the
           recording backend: what a host's RemoteCacheManager would put, under the same key
        -> result {key (the base32 cache-manager key), hash, name, files {filename: base64},
                   metadata (the .json), asm (ptx | amdgcn text)}, blob = the cubin / HSACO

Arguments in the payload: {"kind": "pointer", "dtype": "fp16", "align": 16 | 8, "range32": bool}
(a stand-in tensor: data_ptr() and ptr_range() as a real tensor of that placement answers),
{"kind": "int", "value": n} (a representative value of the specialization class), or
{"kind": "constexpr", "value": v} (passed by keyword). Triton 3.6's HIP backend imports torch
only to ask a tensor's storage size (is_within_2gb); where torch is absent a stand-in module
with an empty Tensor class answers that import, and the stand-in tensors' ptr_range() answers
the question itself.
"""

import base64
import hashlib
import importlib
import os
import sys
import tempfile
import types
from typing import Any

# The recipe rule (aot/recipe.py): the in-repo kernels this worker may import are covered by the
# recipe digest; any kernel module it imports (these or a plugin's) must first match the sha256
# the plan key hashed (payload "sources", checked in _module before the import).
__recipe_imports__ = ("rocke_aot.kernels",)
_STATE: "dict[str, Any]" = {}  # "env": the cache home, "triton": the module (quoted: older Pythons)


class HandlerError(Exception):
    pass


class RequestRefused(HandlerError):
    """The request cannot be run here (a source changed, the module does not import): says
    nothing about what Triton makes of the kernel, so the parent does not record it as a failure."""

    def __str__(self):
        return "request refused: " + super().__str__()


def _clean_env():
    # Triton's cache key covers the cache-invalidating TRITON_* variables that are set; a builder
    # compiles with none of them (a host with one set computes another key, and compiles).
    if _STATE.get("env"):
        return
    for name in [n for n in os.environ if n.startswith("TRITON_")]:
        del os.environ[name]
    home = tempfile.mkdtemp(prefix="rocke-triton-")
    os.environ["TRITON_HOME"] = home
    os.environ["TRITON_CACHE_DIR"] = os.path.join(home, "cache")
    _STATE["env"] = home


def _triton():
    _clean_env()
    if "triton" not in _STATE:
        try:
            import torch  # noqa: F401
        except ImportError:
            stub = types.ModuleType("torch")
            stub.Tensor = type("Tensor", (), {})
            stub.__rocke_stub__ = True
            sys.modules["torch"] = stub
        import triton

        _STATE["triton"] = triton
    return _STATE["triton"]


class _Driver:
    """The stand-in active driver: the JIT asks it for a device, a stream and the target only."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


class _Tensor:
    """A tensor as the JIT's specialization sees one: its dtype, address and extent."""

    def __init__(self, dtype, align, range32):
        self.dtype = dtype
        self._ptr = 0 if align >= 16 else 8
        self._range = 1 << 20 if range32 else 1 << 33

    def data_ptr(self):
        return self._ptr

    def ptr_range(self):
        return self._range


class _Recorder:
    """A RemoteCacheBackend that keeps every put in memory (one instance per cache key)."""

    puts: "dict[str, dict[str, bytes]]" = {}  # cache key -> file name -> bytes

    def __init__(self, key):
        self.key = key

    def get(self, filenames):
        return {}

    def put(self, filename, data):
        _Recorder.puts.setdefault(self.key, {})[filename] = bytes(data)


def _target(spec):
    from triton.backends.compiler import GPUTarget

    backend, arch, warp = spec
    return GPUTarget(backend, int(arch) if backend == "cuda" else arch, int(warp))


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def _jit_function(obj, triton):
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction):
        inner = getattr(obj, "fn", None)
        if inner is None or seen > 8:
            raise HandlerError(f"{obj!r} is not a @triton.jit function (nor an autotune/heuristics wrapper of one)")
        obj, seen = inner, seen + 1
    return obj


def _module(payload):
    if not payload.get("sources"):
        raise RequestRefused(f"a compile request must name the sha256 of {payload.get('module')}'s files (sources)")
    for path, want in sorted((payload.get("sources") or {}).items()):
        try:
            got = _sha256_file(path)
        except OSError as e:
            raise RequestRefused(f"kernel source {path} cannot be read: {e}") from None
        if got != want:
            raise RequestRefused(f"kernel source {path} changed since the plan: sha256 {got[:16]}, planned {want[:16]}")
    for entry in reversed(payload.get("sys_path") or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        return importlib.import_module(payload["module"])
    except Exception as e:
        raise RequestRefused(f"cannot import {payload['module']}: {type(e).__name__}: {e}") from None


def _args(spec_args, triton):
    import triton.language as tl

    positional, constexprs = [], {}
    for a in spec_args:
        kind = a["kind"]
        if kind == "pointer":
            positional.append(_Tensor(getattr(tl, {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
                                                   "fp8e4nv": "float8e4nv", "i32": "int32", "i8": "int8"}
                                           .get(a["dtype"], a["dtype"])), a.get("align", 16), a.get("range32", True)))
        elif kind == "int":
            positional.append(int(a["value"]))
        elif kind == "constexpr":
            constexprs[a["name"]] = a["value"]
        else:
            raise HandlerError(f"argument {a.get('name')}: unknown kind {kind!r}")
    return positional, constexprs


def _compile(payload, blob, ctx):
    triton = _triton()
    from triton import knobs
    from triton.runtime import cache as tcache
    from triton.runtime.driver import driver

    module = _module(payload)
    obj = getattr(module, payload["function"], None)
    if obj is None:
        raise HandlerError(f"{payload['module']} has no {payload['function']}")
    fn = _jit_function(obj, triton)
    target = _target(payload["target"])
    driver.set_active(_Driver(target))
    fn.device_caches.clear()  # the binder captured the last target: a worker serves several
    positional, constexprs = _args(payload["args"], triton)
    _Recorder.puts.clear()
    knobs.cache.manager_class = tcache.RemoteCacheManager
    knobs.cache.remote_manager_class = _Recorder
    try:
        kernel = fn.warmup(*positional, grid=(1,), **constexprs, **(payload.get("options") or {}))
    except Exception as e:
        raise HandlerError(f"triton could not compile {payload['function']} for {target}: "
                           f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}") from None
    finally:
        knobs.cache.manager_class = None
        knobs.cache.remote_manager_class = None
    key = tcache._base32(kernel.hash)
    files = _Recorder.puts.get(key)
    if not files:
        raise HandlerError(f"triton compiled {payload['function']} but put nothing under its key {key}")
    name = kernel.name
    ext = "hsaco" if target.backend == "hip" else "cubin"
    binary = files.get(f"{name}.{ext}")
    if binary is None:
        raise HandlerError(f"triton's entry {key} has no {name}.{ext} (files: {sorted(files)})")
    asm_ext = "amdgcn" if ext == "hsaco" else "ptx"
    asm = files.get(f"{name}.{asm_ext}", b"").decode("utf-8", "replace")
    return {
        "key": key,
        "hash": kernel.hash,
        "name": name,
        "binary": f"{name}.{ext}",
        "files": {f: base64.b64encode(d).decode() for f, d in sorted(files.items()) if f != f"{name}.{ext}"},
        "asm": asm,
        "signature": {k: str(v) for k, v in kernel.src.signature.items()},
        "triton_version": triton.__version__,
        "env_vars": _invalidating_env(),
    }, binary


def _invalidating_env() -> dict:
    """The variables Triton hashes into every cache key (TRITON_DEFAULT_FP_FUSION, ...), as set
    for this compile: recorded with the entry, so a host whose own differ is told why it misses."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:  # a Triton without the list: none recorded
        return {}
    return {str(k): str(v) for k, v in dict(get_cache_invalidating_env_vars()).items()}


_PROBE = '''
import triton
import triton.language as tl

@triton.jit
def rocke_probe(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)
'''


def _describe(payload, blob, ctx):
    triton = _triton()
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key

    probe_dir = os.path.join(_STATE["env"], "probe")
    os.makedirs(probe_dir, exist_ok=True)
    with open(os.path.join(probe_dir, "rocke_triton_probe.py"), "w") as f:
        f.write(_PROBE)
    sources = {os.path.join(probe_dir, "rocke_triton_probe.py"): _sha256_file(os.path.join(probe_dir,
                                                                                          "rocke_triton_probe.py"))}
    targets = {}
    for name, spec in payload.get("targets", {}).items():
        out = {"ok": False}
        try:
            out["backend_hash"] = make_backend(_target(spec)).hash()
            res, binary = _compile({"module": "rocke_triton_probe", "function": "rocke_probe", "sys_path": [probe_dir],
                                    "sources": sources, "target": spec,
                                    "args": [{"kind": "pointer", "dtype": "fp32", "align": 16},
                                             {"kind": "int", "value": 1000},
                                             {"kind": "constexpr", "name": "BLOCK", "value": 128}],
                                    "options": {"num_warps": 4}}, None, ctx)
            out["ok"] = True
            out["bytes"] = len(binary)
            if spec[0] == "hip":
                out["comment"] = _comment(binary)
        except HandlerError as e:
            out["error"] = str(e)
        except Exception as e:  # noqa: BLE001 - a backend that cannot start for this target
            out["error"] = f"{type(e).__name__}: {e}"
        targets[name] = out
    import triton._C.libtriton as lib

    return {
        "triton_version": triton.__version__,
        "python": sys.version.split()[0],
        "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest(),
        "env": dict(get_cache_invalidating_env_vars()),
        "libtriton": os.path.realpath(lib.__file__),
        "torch": "stand-in" if getattr(sys.modules.get("torch"), "__rocke_stub__", False) else "real",
        "targets": targets,
    }, None


def _comment(elf):
    """The .comment strings of an ELF (section headers walked with struct: no pyelftools here)."""
    import struct

    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return []
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx]
    names = elf[strtab[4]:strtab[4] + strtab[5]]
    for s in secs:
        name = names[s[0]:names.index(b"\0", s[0])].decode()
        if name == ".comment":
            data = elf[s[4]:s[4] + s[5]]
            return [x.decode("utf-8", "replace") for x in data.split(b"\0") if x]
    return []


def _handler(fn):
    def handle(payload, blob, ctx):
        try:
            return fn(payload, blob, ctx)
        except HandlerError as e:
            ctx.fail(str(e))

    return handle


HANDLERS = {"triton.describe": _handler(_describe), "triton.compile": _handler(_compile)}
