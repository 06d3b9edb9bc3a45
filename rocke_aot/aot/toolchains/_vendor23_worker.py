"""Worker side of AMD's LLVM 23 (stdlib + ctypes only; a plugin of aot/compiler/_llvm_worker.py).

The library is ``rocm/bindings/llvm/libLLVM.so`` from the ``rocm-bindings-compiler`` wheel: a
whole ROCm LLVM with its C API. Every handler here drives that C API through ctypes:

    load       the ROCm sysdeps shims by path (aot/toolchains/rocm_sysdeps.py), then libLLVM.so,
               RTLD_LOCAL: its DT_NEEDED librocm_sysdeps_{z,zstd}.so.1 are found by soname among
               the loaded objects. Refused when llvmlite's LLVM is already in this process.
    describe   version: LLVMGetVersion (major) and the bitcode reader's own name for itself
               ("Reader: 'LLVM 23.0.0git'", _bitcode_probe.py); per processor: a trivial kernel
               compiled for it (recognized? the `.amdgcn_target` it writes) and the target
               machine's datalayout (LLVMCreateTargetDataLayout)
    compile    IR text -> LLVMParseIRInContext -> LLVMVerifyModule -> LLVMRunPasses(pipeline)
               -> LLVMTargetMachineEmitToMemoryBuffer (object; optionally assembly, optimized IR)

Every option (pipeline, codegen opt level, reloc, code model) comes from the payload, which
the parent builds from aot/compiler/options.py VENDOR23 (the cache key's ``options``).
LLVM's "not a recognized processor/feature" warnings are errors here: LLVM would otherwise
go on with a generic processor.
"""

import ctypes
import os
import re
import sys

_P = ctypes.POINTER
_c = ctypes.c_void_p
_libs: "dict[str, ctypes.CDLL]" = {}  # quoted: a worker may run under an older Python
_FATAL_WARNINGS = ("is not a recognized processor", "is not a recognized feature")
_READER = re.compile(r"Reader: 'LLVM ([0-9]+)\.([0-9]+)\.([0-9]+)([^']*)'")
_TRIVIAL_IR = "define amdgpu_kernel void @rocke_probe() {\n  ret void\n}\n"
# LLVM-C enums (llvm-c/TargetMachine.h)
_OPT = {0: 0, 1: 1, 2: 2, 3: 3}
_RELOC = {"default": 0, "static": 1, "pic": 2}
_CODEMODEL = {"default": 0, "small": 3, "large": 6}
_OBJECT, _ASSEMBLY = 1, 0


class HandlerError(Exception):
    """A request failed in a controlled way; the message says why."""


def _sibling(name):
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(f"rocke_worker_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sig(lib, name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)


def _library(payload):
    path, shims = payload["library"], payload.get("shims", [])
    lib = _libs.get(path)
    if lib is not None:
        return lib
    if "llvmlite.binding" in sys.modules:
        raise HandlerError("this worker already runs llvmlite's LLVM; AMD's LLVM 23 loads only in "
                           "workers of its own (one LLVM per process)")
    if not os.path.isfile(path):
        raise HandlerError(f"no AMD LLVM library at {path}")
    for shim in shims:
        if not os.path.isfile(shim):
            raise HandlerError(f"missing ROCm sysdeps shim {shim} (libLLVM.so needs it)")
        ctypes.CDLL(shim, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as e:
        raise HandlerError(f"cannot load {path}: {e}") from None
    for prefix in ("TargetInfo", "Target", "TargetMC", "AsmPrinter", "AsmParser"):
        getattr(lib, f"LLVMInitializeAMDGPU{prefix}")()
    _sig(lib, "LLVMGetVersion", None, _P(ctypes.c_uint), _P(ctypes.c_uint), _P(ctypes.c_uint))
    _sig(lib, "LLVMContextCreate", _c)
    _sig(lib, "LLVMContextDispose", None, _c)
    _sig(lib, "LLVMCreateMemoryBufferWithMemoryRangeCopy", _c, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p)
    _sig(lib, "LLVMParseIRInContext", ctypes.c_int, _c, _c, _P(_c), _P(_c))
    _sig(lib, "LLVMVerifyModule", ctypes.c_int, _c, ctypes.c_int, _P(_c))
    _sig(lib, "LLVMDisposeModule", None, _c)
    _sig(lib, "LLVMDisposeMessage", None, _c)
    _sig(lib, "LLVMGetTargetFromTriple", ctypes.c_int, ctypes.c_char_p, _P(_c), _P(_c))
    _sig(lib, "LLVMCreateTargetMachine", _c, _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
         ctypes.c_int, ctypes.c_int, ctypes.c_int)
    _sig(lib, "LLVMDisposeTargetMachine", None, _c)
    _sig(lib, "LLVMCreateTargetDataLayout", _c, _c)
    _sig(lib, "LLVMCopyStringRepOfTargetData", _c, _c)
    _sig(lib, "LLVMDisposeTargetData", None, _c)
    _sig(lib, "LLVMCreatePassBuilderOptions", _c)
    _sig(lib, "LLVMDisposePassBuilderOptions", None, _c)
    _sig(lib, "LLVMRunPasses", _c, _c, ctypes.c_char_p, _c, _c)
    _sig(lib, "LLVMGetErrorMessage", _c, _c)
    _sig(lib, "LLVMDisposeErrorMessage", None, _c)
    _sig(lib, "LLVMTargetMachineEmitToMemoryBuffer", ctypes.c_int, _c, _c, ctypes.c_int, _P(_c), _P(_c))
    _sig(lib, "LLVMGetBufferStart", _c, _c)
    _sig(lib, "LLVMGetBufferSize", ctypes.c_size_t, _c)
    _sig(lib, "LLVMDisposeMemoryBuffer", None, _c)
    _sig(lib, "LLVMPrintModuleToString", _c, _c)
    _sig(lib, "LLVMCloneModule", _c, _c)
    _sig(lib, "LLVMGetTarget", ctypes.c_char_p, _c)
    _sig(lib, "LLVMGetDataLayoutStr", ctypes.c_char_p, _c)
    _libs[path] = lib
    return lib


def _message(lib, ptr):
    if not ptr.value:
        return ""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.LLVMDisposeMessage(ptr)


def _target_machine(lib, triple, processor, features, opt=3, reloc="pic", codemodel="default"):
    target, err = _c(), _c()
    if lib.LLVMGetTargetFromTriple(triple.encode(), ctypes.byref(target), ctypes.byref(err)):
        raise HandlerError(f"no target for triple {triple!r}: {_message(lib, err)}")
    tm = lib.LLVMCreateTargetMachine(target, triple.encode(), processor.encode(), features.encode(),
                                     _OPT[int(opt)], _RELOC[reloc], _CODEMODEL[codemodel])
    if not tm:
        raise HandlerError(f"LLVMCreateTargetMachine failed for {triple} {processor}")
    return tm


def _datalayout(lib, tm):
    td = lib.LLVMCreateTargetDataLayout(tm)
    try:
        return _message(lib, _c(lib.LLVMCopyStringRepOfTargetData(td)))
    finally:
        lib.LLVMDisposeTargetData(td)


def _parse(lib, ctx_llvm, data, name=b"rocke-ir"):
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), name)
    mod, err = _c(), _c()
    if lib.LLVMParseIRInContext(ctx_llvm, buf, ctypes.byref(mod), ctypes.byref(err)):  # takes buf
        return None, _message(lib, err) or "unknown parse error"
    return mod, None


def _emit(lib, tm, mod, kind):
    out, err = _c(), _c()
    if lib.LLVMTargetMachineEmitToMemoryBuffer(tm, mod, kind, ctypes.byref(err), ctypes.byref(out)):
        raise HandlerError(f"LLVM code generation failed: {_message(lib, err)}")
    try:
        return ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
    finally:
        lib.LLVMDisposeMemoryBuffer(out)


def _check_stderr(ctx, mark):
    for line in ctx.stderr()[mark:].splitlines():
        if any(w in line for w in _FATAL_WARNINGS) or line.lstrip().startswith("error:"):
            raise HandlerError(f"LLVM diagnostic treated as an error: {line.strip()}")


def _run(lib, ctx, ir, triple, processor, features, opts, *, asm=False, print_ir=False):
    """(object, asm or None, optimized IR or None) for one module; cleans up after itself."""
    llctx = lib.LLVMContextCreate()
    tm = None
    try:
        mod, err = _parse(lib, llctx, ir)
        if mod is None:
            raise HandlerError(f"invalid LLVM IR: {err.strip()}")
        msg = _c()
        if lib.LLVMVerifyModule(mod, 2, ctypes.byref(msg)):  # LLVMReturnStatusAction
            raise HandlerError(f"invalid LLVM IR: {_message(lib, msg).strip()}")
        _message(lib, msg)
        tm = _target_machine(lib, triple, processor, features, opts["opt_level"], opts["reloc"], opts["code_model"])
        if opts.get("pipeline"):
            pbo = lib.LLVMCreatePassBuilderOptions()
            try:
                e = _c(lib.LLVMRunPasses(mod, opts["pipeline"].encode(), tm, pbo))
                if e.value:
                    m = lib.LLVMGetErrorMessage(e)
                    text = ctypes.string_at(m).decode("utf-8", "replace")
                    lib.LLVMDisposeErrorMessage(m)
                    raise HandlerError(f"LLVMRunPasses({opts['pipeline']!r}) failed: {text}")
            finally:
                lib.LLVMDisposePassBuilderOptions(pbo)
        text = _message(lib, _c(lib.LLVMPrintModuleToString(mod))) if print_ir else None
        # Code generation rewrites the module it is given (the structurizer inserts
        # llvm.amdgcn.if/else, which a second codegen cannot select), so the listing comes from
        # a clone of the optimized module, taken before the object is emitted.
        twin = lib.LLVMCloneModule(mod) if asm else None
        obj = _emit(lib, tm, mod, _OBJECT)
        lib.LLVMDisposeModule(mod)
        listing = None
        if twin:
            listing = _emit(lib, tm, twin, _ASSEMBLY).decode("utf-8", "replace")
            lib.LLVMDisposeModule(twin)
        return obj, listing, text
    finally:
        if tm:
            lib.LLVMDisposeTargetMachine(tm)
        lib.LLVMContextDispose(llctx)


# ----------------------------------------------------------------- handlers


def _info(payload, blob, ctx):
    lib = _library(payload)
    major, minor, patch = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib.LLVMGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    llctx = lib.LLVMContextCreate()
    try:
        mod, said = _parse(lib, llctx, _sibling("_bitcode_probe").version_probe_bitcode(), b"probe.bc")
        if mod is not None:
            lib.LLVMDisposeModule(mod)
    finally:
        lib.LLVMContextDispose(llctx)
    m = _READER.search(said or "")
    if not m:
        raise HandlerError(f"the library's bitcode reader did not name its LLVM version (it said: {said!r})")
    if int(m.group(1)) != major.value:
        raise HandlerError(f"LLVMGetVersion says {major.value}.{minor.value}.{patch.value}, the bitcode reader {m.group(0)}")
    return {"llvm_version": f"{m.group(1)}.{m.group(2)}.{m.group(3)}{m.group(4)}", "llvm_major": major.value,
            "c_api_version": [major.value, minor.value, patch.value], "reader_message": said}, None


def _target(payload, blob, ctx):
    """One processor: recognized?, the target machine's datalayout, the target directive."""
    lib = _library(payload)
    processor, triple = payload["processor"], payload.get("triple", "amdgcn-amd-amdhsa")
    tm = _target_machine(lib, triple, processor, payload.get("features", ""))
    try:
        dl = _datalayout(lib, tm)
    finally:
        lib.LLVMDisposeTargetMachine(tm)
    mark = len(ctx.stderr())
    opts = {"opt_level": 0, "reloc": "pic", "code_model": "default", "pipeline": ""}
    try:
        _, asm, _ = _run(lib, ctx, _TRIVIAL_IR.encode(), triple, processor, payload.get("features", ""), opts,
                         asm=True)
        err = None
    except HandlerError as e:
        asm, err = None, str(e)
    said = ctx.stderr()[mark:]
    directive = re.search(r'\.amdgcn_target "([^"]+)"', asm or "")
    return {"processor": processor, "triple": triple, "datalayout": dl, "error": err,
            "known": err is None and not any(w in said for w in _FATAL_WARNINGS),
            "warnings": sorted({ln.strip() for ln in said.splitlines() if "warning:" in ln or "error:" in ln}),
            "amdgcn_target": directive.group(1) if directive else None}, None


def _describe(payload, blob, ctx):
    info, _ = _info(payload, blob, ctx)
    info["targets"] = {p: _target({**payload, "processor": p}, None, ctx)[0] for p in payload["processors"]}
    return info, None


def _compile(payload, blob, ctx):
    """IR -> (pipeline) -> object. Result {log, asm?, ir?}; blob: the relocatable."""
    lib = _library(payload)
    for key in ("opt_level", "reloc", "code_model", "pipeline"):
        if key not in payload.get("options", {}):
            raise HandlerError(f"llvm23.compile needs options[{key!r}] (aot/compiler/options.py VENDOR23)")
    mark = len(ctx.stderr())
    ir = payload["ir"].encode() if "ir" in payload else blob
    obj, asm, text = _run(lib, ctx, ir, payload["triple"], payload["processor"], payload.get("features", ""),
                          payload["options"], asm=bool(payload.get("emit_asm")), print_ir=bool(payload.get("emit_ir")))
    _check_stderr(ctx, mark)
    return {"asm": asm, "ir": text, "log": ctx.stderr()[mark:]}, obj


def _boundary(handler):
    """This module's HandlerError -> the host worker's (ctx.fail): a controlled failure, reported
    with its message, never as a traceback of an unexpected exception."""
    def run(payload, blob, ctx):
        try:
            return handler(payload, blob, ctx)
        except HandlerError as e:
            ctx.fail(str(e))
    return run


HANDLERS = {
    "llvm23.info": _boundary(_info),
    "llvm23.target": _boundary(_target),
    "llvm23.describe": _boundary(_describe),
    "llvm23.compile": _boundary(_compile),
}
