"""Worker side of the LLVM 24 code generator (stdlib + ctypes only; imports nothing from triton).

The triton wheel ships ``triton/backends/amd/lib/libtriton_amd_codegen.so``: LLVM 24's AMDGPU
back end behind four C functions (read from the library's dynamic symbols, its disassembly and
the source beside it in the wheel, ``triton/backends/amd/codegen/amdgpu_codegen.cc``):

    const char *triton_amdgpu_revision(void)                      "<llvm git hash>-<build>"
    int  triton_amdgpu_compile(const char *ir, size_t n, const Options *o,
                               char **asm, size_t *asm_n, char **error)    IR text|bitcode -> AMDGCN asm
    int  triton_amdgpu_assemble(const char *asm, size_t n, const char *triple,
                                const char *processor, const char *features,
                                char **obj, size_t *obj_n, char **error)   asm -> ELF relocatable
    void triton_amdgpu_free(void *)                               frees every returned buffer

    Options, interface version 1 (64 bytes on x86-64; the library compares the first field
    with 1 before it reads anything else: `cmpl $0x1,(%rdx)`):
      u32 version | ptr triple | ptr processor | ptr features | ptr abi | ptr flags
      | ptr disabled_passes | u8 fp_fusion | u8 no_opt | u8 canonicalize_gep | u8 dump_ir | u8 timing

What the library does NOT tell directly, and how this worker learns it from the library itself:
  * its LLVM version: the revision is only a git hash. Its bitcode reader names itself in errors
    once it has read a producer string ("... (Producer: 'P' Reader: 'LLVM 24.0.0git')"), so
    ``info`` feeds it a tiny hand-written bitcode file whose module version record is invalid.
  * its datalayout: ``compile`` replaces the module's datalayout with the target machine's, and
    with dump_ir=1 LLVM prints the module (``target datalayout = ...``) to stderr.
  * the triple it wants: it warns "use the target triple 'amdgpu9.50-amd-amdhsa' instead".

Two ways to run it:
  * as a plugin of the generic compile worker (aot/compiler/_llvm_worker.py ``--plugin``):
    ``HANDLERS`` maps request kinds to ``fn(payload, blob, ctx) -> (result, blob)``;
  * one-shot: ``python _triton24_worker.py KIND`` with the JSON payload on stdin; prints one JSON
    object {"ok", "result"|"error", "blob_b64"}. stderr should be a regular file owned by the
    caller: handlers read LLVM's warnings back from it, and after an abort ("LLVM ERROR: ...")
    the caller finds the message there. An abort kills only this process.

Every payload names the library (``library``) and the interface version the adapter speaks
(``interface_version``); a version other than the one this file knows is refused before any call.

``triton24.optimize`` is the middle end the library lacks: llvmlite's O3 pipeline (LLVM 22) ->
bitcode. It runs in workers of its own role: one LLVM per process, never llvmlite's and the
library's together (each handler refuses if the other LLVM is already loaded).
"""

import base64
import ctypes
import json
import os
import re
import stat
import sys
import tempfile

INTERFACE_VERSION = 1  # the Options layout below


class Options(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("triple", ctypes.c_char_p),
        ("processor", ctypes.c_char_p),
        ("features", ctypes.c_char_p),
        ("abi", ctypes.c_char_p),
        ("flags", ctypes.c_char_p),
        ("disabled_passes", ctypes.c_char_p),
        ("enable_fp_fusion", ctypes.c_uint8),
        ("disable_optimization", ctypes.c_uint8),
        ("canonicalize_gep", ctypes.c_uint8),
        ("dump_ir", ctypes.c_uint8),
        ("enable_timing", ctypes.c_uint8),
    ]


class HandlerError(Exception):
    """A request failed in a controlled way; the message says why."""


_P = ctypes.POINTER
_libs: "dict[str, ctypes.CDLL]" = {}  # quoted: a worker may run under an older Python

# LLVM only warns on these and then goes on with a generic processor / without the feature.
_FATAL_WARNINGS = ("is not a recognized processor", "is not a recognized feature")
_SUGGESTED_TRIPLE = re.compile(r"use the target triple '([^']+)' instead")
_READER = re.compile(r"Reader: 'LLVM ([0-9]+)\.([0-9]+)\.([0-9]+)([^']*)'")
_DATALAYOUT = re.compile(r'^target datalayout = "([^"]*)"', re.M)

# A minimal kernel, used to shake hands and to read the target machine's datalayout.
_TRIVIAL_IR = b"define amdgpu_kernel void @rocke_probe() {\n  ret void\n}\n"


def _library(path):
    lib = _libs.get(path)
    if lib is None:
        if "llvmlite.binding" in sys.modules:
            # One LLVM per process: the middle end (llvmlite) runs in workers of its own.
            raise HandlerError("this worker already runs llvmlite's LLVM; the LLVM 24 library loads "
                               "only in code generator workers")
        if not os.path.isfile(path):
            raise HandlerError(f"no code generator library at {path}")
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        for name in ("triton_amdgpu_revision", "triton_amdgpu_compile", "triton_amdgpu_assemble",
                     "triton_amdgpu_free"):
            if not hasattr(lib, name):
                raise HandlerError(f"{path} does not export {name}: not the triton AMD code generator")
        lib.triton_amdgpu_revision.argtypes = []
        lib.triton_amdgpu_revision.restype = ctypes.c_char_p
        lib.triton_amdgpu_compile.argtypes = [ctypes.c_char_p, ctypes.c_size_t, _P(Options),
                                              _P(ctypes.c_void_p), _P(ctypes.c_size_t), _P(ctypes.c_void_p)]
        lib.triton_amdgpu_compile.restype = ctypes.c_int
        lib.triton_amdgpu_assemble.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                               ctypes.c_char_p, ctypes.c_char_p, _P(ctypes.c_void_p),
                                               _P(ctypes.c_size_t), _P(ctypes.c_void_p)]
        lib.triton_amdgpu_assemble.restype = ctypes.c_int
        lib.triton_amdgpu_free.argtypes = [ctypes.c_void_p]
        lib.triton_amdgpu_free.restype = None
        _libs[path] = lib
    return lib


def _take(lib, ptr, size=None):
    """Copy a library-owned buffer out and free it (the library mallocs every result)."""
    if not ptr.value:
        return None
    try:
        return ctypes.string_at(ptr, size.value) if size is not None else ctypes.string_at(ptr)
    finally:
        lib.triton_amdgpu_free(ptr)


_PLAIN = {"abi": "", "flags": "", "disabled_passes": "", "enable_fp_fusion": 0, "disable_optimization": 0,
          "canonicalize_gep": 0}


def _raw_compile(lib, ir, triple, processor, features="", version=INTERFACE_VERSION, dump_ir=False, options=None):
    """(assembly | None, error | None): one call of triton_amdgpu_compile. ``options``: the
    struct's other fields (the builder sends aot/compiler/options.py TRITON24's; probes: _PLAIN)."""
    o = options if options is not None else _PLAIN
    opts = Options(version, triple.encode(), processor.encode(), features.encode(), o["abi"].encode(),
                   o["flags"].encode(), o["disabled_passes"].encode(), int(o["enable_fp_fusion"]),
                   int(o["disable_optimization"]), int(o["canonicalize_gep"]), 1 if dump_ir else 0, 0)
    out, out_n, err = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
    rc = lib.triton_amdgpu_compile(ir, len(ir), ctypes.byref(opts), ctypes.byref(out),
                                   ctypes.byref(out_n), ctypes.byref(err))
    message = _take(lib, err)
    text = _take(lib, out, out_n)
    if rc != 0:
        return None, (message or b"unknown code-generation failure").decode("utf-8", "replace").strip()
    return text.decode("utf-8"), None


def _raw_assemble(lib, asm, triple, processor, features=""):
    data = asm.encode()
    out, out_n, err = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
    rc = lib.triton_amdgpu_assemble(data, len(data), triple.encode(), processor.encode(),
                                    features.encode(), ctypes.byref(out), ctypes.byref(out_n),
                                    ctypes.byref(err))
    message = _take(lib, err)
    obj = _take(lib, out, out_n)
    if rc != 0:
        return None, (message or b"unknown assembly failure").decode("utf-8", "replace").strip()
    return obj, None


def _check_version(payload):
    asked = payload.get("interface_version", INTERFACE_VERSION)
    if asked != INTERFACE_VERSION:
        raise HandlerError(
            f"interface version {asked!r} refused: this adapter knows only the code generator's "
            f"interface version {INTERFACE_VERSION} (its options layout); a library speaking another "
            f"version must be characterized and given an adapter first"
        )


# ----------------------------------------------------------------- the version probe


def _sibling(name):
    """A stdlib-only helper module beside this file (plugins are loaded by path, not as a package)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(f"rocke_worker_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


version_probe_bitcode = _sibling("_bitcode_probe").version_probe_bitcode


# ----------------------------------------------------------------- handlers


def _info(payload, blob, ctx):
    """Revision, LLVM version (from the bitcode reader), and the interface handshake."""
    _check_version(payload)
    lib = _library(payload["library"])
    revision = lib.triton_amdgpu_revision().decode("utf-8", "replace")
    _, said = _raw_compile(lib, version_probe_bitcode(), "amdgcn-amd-amdhsa", "gfx942")
    m = _READER.search(said or "")
    if not m:
        ctx.fail(f"the library's bitcode reader did not name its LLVM version (it said: {said!r})")
    # Handshake: the version this adapter speaks must compile a trivial kernel...
    asm, err = _raw_compile(lib, _TRIVIAL_IR, "amdgcn-amd-amdhsa", "gfx942")
    if asm is None:
        ctx.fail(f"the library refuses interface version {INTERFACE_VERSION}: {err}")
    # ...and the next one must be refused, which shows the library checks the field at all.
    _, next_err = _raw_compile(lib, _TRIVIAL_IR, "amdgcn-amd-amdhsa", "gfx942", version=INTERFACE_VERSION + 1)
    return {
        "revision": revision,
        "llvm_version": f"{m.group(1)}.{m.group(2)}.{m.group(3)}{m.group(4)}",
        "llvm_major": int(m.group(1)),
        "reader_message": said,
        "interface_version": INTERFACE_VERSION,
        "next_version_refusal": next_err,
    }, None


def _target(payload, blob, ctx):
    """For one processor: recognized?, the datalayout, the triple LLVM asks for, warnings."""
    _check_version(payload)
    lib = _library(payload["library"])
    processor, triple = payload["processor"], payload.get("triple", "amdgcn-amd-amdhsa")
    mark = len(ctx.stderr())
    asm, err = _raw_compile(lib, _TRIVIAL_IR, triple, processor, payload.get("features", ""), dump_ir=True)
    said = ctx.stderr()[mark:]
    dl = _DATALAYOUT.search(said)
    warnings = sorted({ln.strip() for ln in said.splitlines() if ln.startswith("warning:") or "warning:" in ln[:40]})
    suggested = _SUGGESTED_TRIPLE.search(said)
    amdgcn_target = re.search(r'\.amdgcn_target "([^"]+)"', asm or "")
    # Which target-ID settings this processor honours: with the module flag set to 0, LLVM 24
    # names the setting in the target directive ("gfx942:xnack-"); gfx1250 has no xnack modes.
    settable = []
    for feat in payload.get("probe_features", ()):
        flagged = _TRIVIAL_IR + f'!llvm.module.flags = !{{!0}}\n!0 = !{{i32 1, !"amdgpu.{feat}", i32 0}}\n'.encode()
        fasm, _ = _raw_compile(lib, flagged, triple, processor)
        directive = re.search(r'\.amdgcn_target "([^"]+)"', fasm or "")
        if directive and f":{feat}-" in directive.group(1):
            settable.append(feat)
    return {
        "settable_features": settable,
        "processor": processor,
        "triple": triple,
        "known": err is None and not any(w in said for w in _FATAL_WARNINGS),
        "error": err,
        "datalayout": dl.group(1) if dl else None,
        "suggested_triple": suggested.group(1) if suggested else None,
        "warnings": warnings,
        "amdgcn_target": amdgcn_target.group(1) if amdgcn_target else None,
    }, None


def _describe(payload, blob, ctx):
    """``info`` plus ``target`` for each of ``processors``, in one process (detection)."""
    info, _ = _info(payload, blob, ctx)
    features = payload.get("probe_features", {})
    info["targets"] = {p: _target({**payload, "processor": p, "probe_features": features.get(p, ())}, None, ctx)[0]
                       for p in payload["processors"]}
    return info, None


def _compile(payload, blob, ctx):
    """IR text -> AMDGCN assembly -> ELF relocatable. Result: {asm, log}; blob: the object."""
    _check_version(payload)
    lib = _library(payload["library"])
    triple, processor, features = payload["triple"], payload["processor"], payload.get("features", "")
    ir = payload["ir"].encode() if "ir" in payload else blob
    mark = len(ctx.stderr())
    if "options" not in payload:
        ctx.fail("triton24.compile needs 'options' (the Options struct fields, aot/compiler/options.py)")
    asm, err = _raw_compile(lib, ir, triple, processor, features, options=payload["options"])
    if asm is None:
        ctx.fail(f"LLVM code generation failed: {err}")
    for line in ctx.stderr()[mark:].splitlines():
        # LLVM 24 prints "error: xnack/sramecc should be specified via module flags" for a
        # target-ID feature passed as a subtarget feature, then ignores it and returns success.
        if any(w in line for w in _FATAL_WARNINGS) or line.lstrip().startswith("error:"):
            ctx.fail(f"LLVM diagnostic treated as an error: {line.strip()}")
    obj, err = _raw_assemble(lib, asm, triple, processor, features)
    if obj is None:
        ctx.fail(f"the library's assembler rejected its own AMDGCN: {err}")
    return {"asm": asm, "log": ctx.stderr()[mark:]}, obj


_ADDRSPACE_10_UP = re.compile(r"addrspace\((1[0-5])\)")


def _optimize(payload, blob, ctx):
    """The middle end: llvmlite's O3 module pipeline (LLVM 22 here) -> bitcode for LLVM 24.

    The library is a code generator only; clang, COMGR and Triton all run a middle end first.
    This worker runs the project's llvmlite for it, retargeted to that LLVM's own triple and
    datalayout (LLVM 24's adds only address spaces 10..15, which the IR must not use), and
    returns bitcode, which LLVM 24 reads with its guaranteed upgrade path.
    """
    if _libs:
        ctx.fail("this worker has the LLVM 24 library loaded; the middle end runs in workers of its own")
    ir = payload["ir"]
    m = _ADDRSPACE_10_UP.search(ir)
    if m:
        ctx.fail(f"IR uses addrspace({m.group(1)}), where LLVM 22's and LLVM 24's datalayouts differ: "
                 f"the LLVM 22 middle end cannot optimize it")
    import llvmlite
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
    # Every option comes from the payload (aot/compiler/options.py TRITON24.middle_end, in the key).
    tm = target.create_target_machine(cpu=payload["processor"], features="", opt=int(payload["opt"]),
                                      reloc=payload["reloc"], codemodel=payload["codemodel"])
    try:
        mod = llvm.parse_assembly(ir)
        mod.triple = "amdgcn-amd-amdhsa"
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as e:
        ctx.fail(f"invalid LLVM IR: {str(e).strip()}")
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=int(payload["speed_level"])))
    pb.getModulePassManager().run(mod, pb)
    return {"llvm_version": ".".join(map(str, llvm.llvm_version_info)),
            "llvmlite_version": llvmlite.__version__}, mod.as_bitcode()


def _raw_version(payload, blob, ctx):
    """Call compile with an arbitrary options version (characterization of the library's check)."""
    lib = _library(payload["library"])
    asm, err = _raw_compile(lib, _TRIVIAL_IR, "amdgcn-amd-amdhsa", "gfx942", version=int(payload["version"]))
    return {"accepted": asm is not None, "error": err}, None


HANDLERS = {
    "triton24.info": _info,
    "triton24.target": _target,
    "triton24.describe": _describe,
    "triton24.compile": _compile,
    "triton24.raw_version": _raw_version,
    "triton24.optimize": _optimize,
}


# ----------------------------------------------------------------- one-shot mode


class _OneShotContext:
    """stderr since the request began. fd 2 should be a regular file owned by the parent, so
    LLVM's last words survive an abort; if it is not seekable, a temp file takes its place."""

    def __init__(self):
        sys.stderr.flush()
        self._reader = None
        try:
            if not stat.S_ISREG(os.fstat(2).st_mode):
                raise OSError("stderr is not a regular file")
            self._mark = os.lseek(2, 0, os.SEEK_END)
            try:
                os.pread(2, 0, 0)
                self._reader = 2
            except OSError:  # opened write-only (a shell's 2>file): read it through its path
                self._reader = os.open("/proc/self/fd/2", os.O_RDONLY)
        except OSError:
            self._reader = None
        if self._reader is None:  # a pipe or a tty
            tmp = tempfile.TemporaryFile()
            os.dup2(tmp.fileno(), 2)
            self._keep, self._mark, self._reader = tmp, 0, 2

    def stderr(self):
        sys.stderr.flush()
        end = os.lseek(2, 0, os.SEEK_END)
        if end <= self._mark:
            return ""
        return os.pread(self._reader, end - self._mark, self._mark).decode("utf-8", "replace")

    def fail(self, message):
        raise HandlerError(message)


def main(argv):
    kind = argv[0]
    payload = json.loads(sys.stdin.read() or "{}")
    out = os.fdopen(os.dup(1), "w")
    ctx = _OneShotContext()
    os.dup2(2, 1)  # nothing the library prints can corrupt the reply
    try:
        handler = HANDLERS.get(kind)
        if handler is None:
            raise HandlerError(f"unknown request kind {kind!r}; known: {sorted(HANDLERS)}")
        result, blob = handler(payload, None, ctx)
        reply = {"ok": True, "result": result,
                 "blob_b64": base64.b64encode(blob).decode() if blob is not None else None}
    except HandlerError as e:
        reply = {"ok": False, "error": str(e)}
    out.write(json.dumps(reply))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
