"""Worker plugin: drive a COMGR library through hip-python's rocm.bindings.amd_comgr.

Loaded by _llvm_worker.py (``--plugin``) in a worker process, so a COMGR crash
kills that worker only. Standalone: stdlib + rocm.bindings, no rocke_aot import.

    ROCKE_AOT_COMGR_LIB (set by the parent)  -> the library hip-python dlopens
    comgr.info     -> {"interface": [major, minor], "isas": ["amdgcn-amd-amdhsa--gfx90a", ...]}
    comgr.compile  payload {ir, isa, options}
                   IR text as AMD_COMGR_DATA_KIND_BC --CODEGEN_BC_TO_RELOCATABLE-->
                   relocatable --LINK_RELOCATABLE_TO_EXECUTABLE--> executable (blob)

Action numbers are part of COMGR's C ABI and changed between interface
majors: interface 2 (ROCm 5/6, e.g. Debian's libamd-comgr2) numbers
CODEGEN_BC_TO_RELOCATABLE 6 and LINK_RELOCATABLE_TO_EXECUTABLE 9 (its header
still had ADD_DEVICE_LIBRARIES and OPTIMIZE_BC_TO_BC); interface 3 (what the
installed hip-python's enum is generated from) numbers them 4 and 7. The
bindings accept any subclass of their enum base, so the right numbers are
passed for the library actually loaded.
"""

import ctypes
import os

_c = None
_actions = None


def _bindings(ctx):
    global _c, _actions
    if _c is not None:
        return _c, _actions
    lib = os.environ.get("ROCKE_AOT_COMGR_LIB")
    if not lib or not os.path.isfile(lib):
        ctx.fail(f"ROCKE_AOT_COMGR_LIB={lib!r} is not a file")
    import rocm.bindings.util.paths as paths

    # hip-python resolves the library lazily through this function, on the first
    # call; point it at the library this toolchain is about.
    original = paths.get_library_path
    paths.get_library_path = lambda name, *a, **k: os.fsencode(lib) if name == "amd_comgr" else original(name, *a, **k)
    from rocm.bindings import amd_comgr as c

    # The bindings print and ignore a failed dlopen/dlsym and return garbage, so ask first.
    missing = [f for f in ("amd_comgr_get_version", "amd_comgr_do_action") if not c.has_symbol(f)]
    if missing:
        ctx.fail(f"{lib} is not a COMGR library (no {', '.join(missing)})")
    status, major, minor = c.amd_comgr_get_version()
    if major == 2:
        class Actions(c._amd_comgr_action_kind_s__Base):
            CODEGEN_BC_TO_RELOCATABLE = 6
            LINK_RELOCATABLE_TO_EXECUTABLE = 9
        actions = (Actions.CODEGEN_BC_TO_RELOCATABLE, Actions.LINK_RELOCATABLE_TO_EXECUTABLE)
    elif major == 3:
        k = c.amd_comgr_action_kind_s
        actions = (k.AMD_COMGR_ACTION_CODEGEN_BC_TO_RELOCATABLE, k.AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_EXECUTABLE)
    else:
        ctx.fail(f"COMGR interface {major}.{minor} at {lib}: action numbering not known (known: 2, 3)")
    _c, _actions = c, actions
    _c.version = (major, minor)
    return _c, _actions


def _check(ctx, what, ret, log=b""):
    status = ret[0]
    if int(status) != 0:
        extra = log.decode("utf-8", "replace").strip() if log else ""
        ctx.fail(f"COMGR {what} failed ({getattr(status, 'name', status)})" + (f": {extra}" if extra else ""))
    return ret[1] if len(ret) == 2 else ret[1:]


def _data_bytes(ctx, c, data):
    size = ctypes.c_size_t(0)
    _check(ctx, "get_data size", c.amd_comgr_get_data(data, ctypes.addressof(size), None))
    buf = bytearray(size.value)
    if size.value:
        _check(ctx, "get_data", c.amd_comgr_get_data(data, ctypes.addressof(size), buf))
    return bytes(buf)


def _all_of(ctx, c, data_set, kind):
    n = _check(ctx, "action_data_count", c.amd_comgr_action_data_count(data_set, kind))
    out = []
    for i in range(n):
        data = _check(ctx, "action_data_get_data", c.amd_comgr_action_data_get_data(data_set, kind, i))
        out.append(_data_bytes(ctx, c, data))
        c.amd_comgr_release_data(data)
    return out


def _info(payload, blob, ctx):
    c, _ = _bindings(ctx)
    n = _check(ctx, "get_isa_count", c.amd_comgr_get_isa_count())
    isas = [str(_check(ctx, "get_isa_name", c.amd_comgr_get_isa_name(i))) for i in range(n)]
    return {"interface": list(c.version), "isas": isas}, None


def _compile(payload, blob, ctx):
    c, (codegen, link) = _bindings(ctx)
    kinds = c.amd_comgr_data_kind_s
    ir = payload["ir"].encode()
    isa = payload["isa"].encode()
    options = [o.encode() for o in payload.get("options", [])]
    data = _check(ctx, "create_data", c.amd_comgr_create_data(kinds.AMD_COMGR_DATA_KIND_BC))
    sets = [_check(ctx, "create_data_set", c.amd_comgr_create_data_set()) for _ in range(3)]
    info = _check(ctx, "create_action_info", c.amd_comgr_create_action_info())
    try:
        # COMGR's codegen reads textual IR given as the BC kind (LLVM's IR reader
        # accepts both), so the IR we hashed is exactly what it compiles.
        _check(ctx, "set_data", c.amd_comgr_set_data(data, len(ir), ir))
        _check(ctx, "set_data_name", c.amd_comgr_set_data_name(data, b"kernel.ll"))
        _check(ctx, "data_set_add", c.amd_comgr_data_set_add(sets[0], data))
        _check(ctx, "set_isa_name", c.amd_comgr_action_info_set_isa_name(info, isa))
        _check(ctx, "set_logging", c.amd_comgr_action_info_set_logging(info, True))
        _check(ctx, "set_option_list", c.amd_comgr_action_info_set_option_list(info, options, len(options)))
        logs = []
        for action, src, dst, what in ((codegen, sets[0], sets[1], "codegen"), (link, sets[1], sets[2], "link")):
            ret = c.amd_comgr_do_action(action, info, src, dst)
            log = b"\n".join(_all_of(ctx, c, dst, kinds.AMD_COMGR_DATA_KIND_LOG))
            logs.append(log.decode("utf-8", "replace").strip())
            _check(ctx, f"{what} action", ret, log)
            if what == "codegen":
                _check(ctx, "set_option_list", c.amd_comgr_action_info_set_option_list(info, [], 0))
        exe = _all_of(ctx, c, sets[2], kinds.AMD_COMGR_DATA_KIND_EXECUTABLE)
        if len(exe) != 1:
            ctx.fail(f"COMGR link produced {len(exe)} executables, expected 1")
        return {"log": "\n".join(x for x in logs if x)}, exe[0]
    finally:
        c.amd_comgr_destroy_action_info(info)
        for s in sets:
            c.amd_comgr_destroy_data_set(s)
        c.amd_comgr_release_data(data)


HANDLERS = {"comgr.info": _info, "comgr.compile": _compile}
