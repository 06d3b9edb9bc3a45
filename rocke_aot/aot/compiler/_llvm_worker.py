"""Standalone compile worker: a small request server over stdin/stdout (stdlib + llvmlite only).

It runs under ANY interpreter that has llvmlite (the project's, an llvm20 lane
venv that does not have rocke_aot installed) or, with plugins, under one that
has some other compiler library. The parent (aot/compiler/worker.py) keeps it
alive across compiles, because spawning Python and importing llvmlite costs far
more than one kernel's codegen.

    parent                                       this process
      |  frame(header={"kind", "payload"}, blob) -->  HANDLERS[kind](payload, blob, ctx)
      |  <-- frame(header={"ok", "result"|"error"}, blob)
      |
      |  stderr: a regular file owned by the parent. LLVM writes its warnings and
      |  its fatal "LLVM ERROR: ..." there; when LLVM aborts this process, the
      |  parent reads the message from that file and starts a fresh worker.

Frame: 8 bytes big-endian (header length, blob length), the JSON header, the blob.
The first frame a worker writes is a handshake: {"ok": true, "ready": true, "pid": ...}.

Handlers: ``fn(payload: dict, blob: bytes | None, ctx) -> (result: dict, blob | None)``.
``ctx.stderr()`` is what fd 2 received since the request began (LLVM warnings);
``ctx.fail(message)`` ends the request with an error (the worker lives on).
Plugins (``--plugin FILE.py``) are files defining ``HANDLERS = {kind: fn}``; they
add request kinds, e.g. a COMGR or a library code generator driven through ctypes.

Built-in kinds:
    ping          -> {"pid", "python"}
    llvm.info     -> {"llvm_version", "llvmlite_version"}
    llvm.compile  payload {ir, triple, cpu, features, emit: "obj"|"asm", opt: 0..3, pipeline: true,
                           speed_level (default opt), reloc ("pic"), codemodel ("default")}
                  IR -> parse -> verify -> O<opt> module pipeline (new pass manager;
                  skipped with pipeline=false, to show what codegen alone gives)
                  -> object (AMDGPU) or assembly (NVPTX PTX)      -> blob
"""

import importlib.util
import json
import os
import struct
import sys
import traceback

_FRAME = struct.Struct("!II")

# LLVM only warns on these and goes on with a generic processor / without the
# feature, then misbehaves; a compile that triggers one is failed.
_FATAL_WARNINGS = ("is not a recognized processor", "is not a recognized feature")


class HandlerError(Exception):
    """A request failed in a controlled way (bad input, a tool reported an error)."""


class Context:
    def __init__(self):
        self._mark = _stderr_mark()

    def stderr(self):
        return _stderr_since(self._mark)

    def fail(self, message):
        raise HandlerError(message)


def _stderr_mark():
    sys.stderr.flush()
    try:
        return os.lseek(2, 0, os.SEEK_END)
    except OSError:
        return None


def _stderr_since(mark):
    sys.stderr.flush()
    if mark is None:
        return ""
    end = os.lseek(2, 0, os.SEEK_END)
    return os.pread(2, max(0, end - mark), mark).decode("utf-8", "replace") if end > mark else ""


# ---------------------------------------------------------------- llvmlite handlers

_llvm = None
_target_machines: "dict[tuple, object]" = {}  # quoted: a worker may run under an older Python


def _binding():
    global _llvm
    if _llvm is None:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _llvm = llvm
    return _llvm


def _target_machine(ctx, triple, cpu, features, opt, reloc="pic", codemodel="default"):
    key = (triple, cpu, features, opt, reloc, codemodel)
    tm = _target_machines.get(key)
    if tm is None:
        llvm = _binding()
        try:
            target = llvm.Target.from_triple(triple)
        except RuntimeError as e:
            ctx.fail(f"LLVM has no target for triple {triple!r}: {e}")
        before = ctx.stderr()
        tm = target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc=reloc, codemodel=codemodel)
        said = ctx.stderr()[len(before):]
        for line in said.splitlines():
            if any(w in line for w in _FATAL_WARNINGS):
                ctx.fail(f"LLVM does not know {cpu!r} / features {features!r} for {triple}: {line.strip()}")
        _target_machines[key] = tm
    return tm


def _llvm_info(payload, blob, ctx):
    import llvmlite

    llvm = _binding()
    return {
        "llvm_version": ".".join(str(x) for x in llvm.llvm_version_info),
        "llvmlite_version": llvmlite.__version__,
    }, None


def _llvm_compile(payload, blob, ctx):
    llvm = _binding()
    triple, cpu = payload["triple"], payload["cpu"]
    features, opt = payload.get("features", ""), int(payload.get("opt", 3))
    emit = payload.get("emit", "obj")
    if emit not in ("obj", "asm"):
        ctx.fail(f"unknown emit kind {emit!r}")
    # The builder's requests carry every option (aot/compiler/options.py, also in the cache key);
    # the defaults here serve hand-made requests (characterization, tests) only.
    tm = _target_machine(ctx, triple, cpu, features, opt, payload.get("reloc", "pic"),
                         payload.get("codemodel", "default"))
    try:
        mod = llvm.parse_assembly(payload["ir"])
        mod.verify()
    except RuntimeError as e:
        ctx.fail(f"invalid LLVM IR: {str(e).strip()}")
    # The IR carries the emission profile's triple and datalayout; a mismatch with
    # this target machine means the IR was lowered for another toolchain.
    if mod.triple and mod.triple != triple:
        ctx.fail(f"IR triple {mod.triple!r} does not match the compile target {triple!r}")
    reported = str(tm.target_data)
    if not mod.data_layout:
        mod.data_layout = reported
    elif mod.data_layout != reported:
        ctx.fail(f"IR datalayout {mod.data_layout!r} differs from the target machine's {reported!r}")
    mod.triple = triple
    if opt > 0 and payload.get("pipeline", True):
        # Codegen alone neither optimizes loops nor infers the amdgpu-no-* attributes;
        # run the middle end as clang and COMGR do.
        pto = llvm.create_pipeline_tuning_options(speed_level=int(payload.get("speed_level", opt)))
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    out = tm.emit_object(mod) if emit == "obj" else tm.emit_assembly(mod).encode()
    for line in ctx.stderr().splitlines():
        if any(w in line for w in _FATAL_WARNINGS):
            ctx.fail(f"LLVM warning treated as an error: {line.strip()}")
    return {"format": emit}, out


def _ping(payload, blob, ctx):
    return {"pid": os.getpid(), "python": sys.executable}, None


HANDLERS = {"ping": _ping, "llvm.info": _llvm_info, "llvm.compile": _llvm_compile}


def _load_plugin(path):
    spec = importlib.util.spec_from_file_location(f"rocke_worker_plugin_{len(HANDLERS)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    HANDLERS.update(module.HANDLERS)


# ---------------------------------------------------------------- framing


def _read_exact(stream, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _send(stream, header, blob=None):
    head = json.dumps(header).encode()
    blob = blob or b""
    stream.write(_FRAME.pack(len(head), len(blob)) + head + blob)
    stream.flush()


def main(argv):
    plugins = [argv[i + 1] for i, a in enumerate(argv) if a == "--plugin"]
    # Keep private copies of the protocol pipes, then point fd 0/1 elsewhere so a
    # library printing to stdout cannot corrupt the frames.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for path in plugins:
        _load_plugin(path)
    _send(proto_out, {"ok": True, "ready": True, "pid": os.getpid(), "kinds": sorted(HANDLERS)})
    while True:
        head = _read_exact(proto_in, _FRAME.size)
        if head is None:
            return 0
        hlen, blen = _FRAME.unpack(head)
        header = json.loads(_read_exact(proto_in, hlen))
        blob = _read_exact(proto_in, blen) if blen else None
        ctx = Context()
        try:
            handler = HANDLERS.get(header.get("kind"))
            if handler is None:
                raise HandlerError(f"unknown request kind {header.get('kind')!r}; known: {sorted(HANDLERS)}")
            result, out = handler(header.get("payload") or {}, blob, ctx)
            reply = {"ok": True, "result": result}
        except HandlerError as e:
            reply, out = {"ok": False, "error": str(e), "error_type": "HandlerError"}, None
        except Exception as e:  # a bug or an unexpected library error: report it, stay alive
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "error_type": type(e).__name__,
                     "traceback": traceback.format_exc(limit=8)}
            out = None
        _send(proto_out, reply, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
