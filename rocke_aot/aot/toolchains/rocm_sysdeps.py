"""The two small libraries AMD's libLLVM.so needs and no Debian package ships.

ROCm builds its LLVM against renamed copies of zlib and zstd: the wheel's
``rocm/bindings/llvm/libLLVM.so`` has ``DT_NEEDED`` entries ``librocm_sysdeps_z.so.1`` and
``librocm_sysdeps_zstd.so.1`` and binds 12 functions from them at symbol version
``AMDROCM_SYSDEPS_1.0`` (read with ``readelf -V`` / ``nm -D``). This module builds
forwarding libraries of those names:

    build(dir) ─┬─ IR per library (this file, SHIMS): each exported function loads the real
                │  one from Debian's libz.so.1 / libzstd.so.1 with dlopen + dlsym on first use
                │  (cached in an atomic pointer) and tail-calls it
                ├─ the compile pool's llvmlite worker: IR -> x86-64 PIC object (llvm.compile)
                └─ ld.lld -shared -soname <name> --version-script (AMDROCM_SYSDEPS_1.0 { ... })
                      libc.so.6 (dlopen/dlsym: glibc >= 2.34)  ->  <dir>/<soname>

Why this shape:
  * No new packages: llvmlite and ld.lld are what the project already runs (no C compiler,
    no -dev headers), so a fresh Debian machine and the Docker build stage build it alike.
  * dlsym by name instead of linking against the real libraries: the shim never refers to
    ``compress2`` itself, so its own definition can never capture its own call (a shim that
    linked libz and called ``compress2`` could bind that call to itself, depending on the
    lookup scope it was loaded in).
  * Only the compile worker loads it (aot/toolchains/_vendor23_worker.py loads each shim by
    path before libLLVM.so, which then finds its DT_NEEDED by soname among loaded objects):
    no LD_LIBRARY_PATH, nothing in the CLI or service process.

Where: ``$ROCKE_AOT_ROCM_SYSDEPS`` (a directory) when set, else ``$ROCKE_AOT_HOME/sysdeps``.
``rocke-aot toolchain install llvm23`` (run by scripts/setup.sh) builds them there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler import WorkerSpec, default_pool
from rocke_aot.aot.compiler.lld import find_lld
from rocke_aot.aot.compiler.worker import answer_blob
from rocke_aot.errors import ToolchainError

VERSION_NODE = "AMDROCM_SYSDEPS_1.0"
SETUP_HINT = "run `bash scripts/setup.sh` (it runs `rocke-aot toolchain install llvm23`)"
TRIPLE = "x86_64-unknown-linux-gnu"


@dataclass(frozen=True)
class Forward:
    name: str
    ret: str  # LLVM IR type (x86-64 SysV: uLong, size_t -> i64; int, uInt, enum -> i32)
    params: tuple[str, ...]


@dataclass(frozen=True)
class Shim:
    soname: str  # what libLLVM.so names in DT_NEEDED
    real: str  # the Debian library the functions come from
    functions: tuple[Forward, ...]


# Signatures from zlib.h (1.2.13) and zstd.h (1.5.4).
SHIMS: tuple[Shim, ...] = (
    Shim("librocm_sysdeps_z.so.1", "libz.so.1", (
        Forward("compress2", "i32", ("ptr", "ptr", "ptr", "i64", "i32")),
        Forward("compressBound", "i64", ("i64",)),
        Forward("crc32", "i64", ("i64", "ptr", "i32")),
        Forward("uncompress", "i32", ("ptr", "ptr", "ptr", "i64")),
    )),
    Shim("librocm_sysdeps_zstd.so.1", "libzstd.so.1", (
        Forward("ZSTD_compress2", "i64", ("ptr", "ptr", "i64", "ptr", "i64")),
        Forward("ZSTD_CCtx_setParameter", "i64", ("ptr", "i32", "i32")),
        Forward("ZSTD_compressBound", "i64", ("i64",)),
        Forward("ZSTD_createCCtx", "ptr", ()),
        Forward("ZSTD_decompress", "i64", ("ptr", "i64", "ptr", "i64")),
        Forward("ZSTD_freeCCtx", "i64", ("ptr",)),
        Forward("ZSTD_getErrorName", "ptr", ("i64",)),
        Forward("ZSTD_isError", "i32", ("i64",)),
    )),
)
SONAMES: tuple[str, ...] = tuple(s.soname for s in SHIMS)


def shim_dir() -> Path:
    explicit = settings.raw(settings.ROCM_SYSDEPS)
    if explicit:
        return Path(explicit)
    from rocke_aot.paths import home

    return home() / "sysdeps"


def shim_paths(directory: Path | None = None) -> dict[str, Path]:
    d = directory or shim_dir()
    return {s.soname: d / s.soname for s in SHIMS}


def missing(directory: Path | None = None) -> list[str]:
    """The shim files that are not there (names), in SHIMS order."""
    return [name for name, p in shim_paths(directory).items() if not p.is_file()]


def _cstr(name: str, text: str) -> str:
    data = text.encode() + b"\0"
    body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
    return f'@{name} = private unnamed_addr constant [{len(data)} x i8] c"{body}"'


def shim_ir(shim: Shim) -> str:
    """One forwarding library as LLVM IR (x86-64)."""
    lines = [f'target triple = "{TRIPLE}"', "",
             _cstr("lib", shim.real), "@handle = internal global ptr null, align 8",
             _cstr("fmt", f"rocke-aot {shim.soname}: cannot forward %s to {shim.real}: %s\n"), ""]
    for f in shim.functions:
        lines.append(_cstr(f"name.{f.name}", f.name))
        lines.append(f"@fn.{f.name} = internal global ptr null, align 8")
    lines += ["",
              # resolve(slot, name): the real function, looked up once (a racing second lookup
              # stores the same pointer). Fails loudly: LLVM must never run on a missing zlib.
              "define internal ptr @resolve(ptr %slot, ptr %name) {",
              "  %h0 = load atomic ptr, ptr @handle acquire, align 8",
              "  %have = icmp ne ptr %h0, null",
              "  br i1 %have, label %sym, label %open",
              "open:",
              "  %h1 = call ptr @dlopen(ptr @lib, i32 2)",  # RTLD_NOW; RTLD_LOCAL = 0
              "  %ok1 = icmp ne ptr %h1, null",
              "  br i1 %ok1, label %keep, label %die",
              "keep:",
              "  store atomic ptr %h1, ptr @handle release, align 8",
              "  br label %sym",
              "sym:",
              "  %h = phi ptr [ %h0, %0 ], [ %h1, %keep ]",
              "  %f = call ptr @dlsym(ptr %h, ptr %name)",
              "  %ok2 = icmp ne ptr %f, null",
              "  br i1 %ok2, label %done, label %die",
              "done:",
              "  store atomic ptr %f, ptr %slot release, align 8",
              "  ret ptr %f",
              "die:",
              "  %err = call ptr @dlerror()",
              "  %stderr = load ptr, ptr @stderr, align 8",
              "  %n = call i32 (ptr, ptr, ...) @fprintf(ptr %stderr, ptr @fmt, ptr %name, ptr %err)",
              "  call void @abort()",
              "  unreachable",
              "}", ""]
    for f in shim.functions:
        params = ", ".join(f"{t} %a{i}" for i, t in enumerate(f.params))
        args = ", ".join(f"{t} %a{i}" for i, t in enumerate(f.params))
        call = f"musttail call {f.ret} %f({args})"
        lines += [f"define {f.ret} @{f.name}({params}) {{",
                  f"  %c = load atomic ptr, ptr @fn.{f.name} acquire, align 8",
                  "  %have = icmp ne ptr %c, null",
                  "  br i1 %have, label %go, label %look",
                  "look:",
                  f"  %r = call ptr @resolve(ptr @fn.{f.name}, ptr @name.{f.name})",
                  "  br label %go",
                  "go:",
                  "  %f = phi ptr [ %c, %0 ], [ %r, %look ]",
                  f"  %v = {call}",
                  f"  ret {f.ret} %v",
                  "}", ""]
    lines += ["declare ptr @dlopen(ptr, i32)", "declare ptr @dlsym(ptr, ptr)", "declare ptr @dlerror()",
              "declare i32 @fprintf(ptr, ptr, ...)", "declare void @abort() noreturn",
              "@stderr = external global ptr", ""]
    return "\n".join(lines)


def version_script(shim: Shim) -> str:
    names = "".join(f"    {f.name};\n" for f in shim.functions)
    return f"{VERSION_NODE} {{\n  global:\n{names}  local:\n    *;\n}};\n"


def _libc() -> str:
    """The C library this interpreter runs on (dlopen, dlsym, fprintf, abort, stderr), by path:
    linking it by path needs no libc6-dev (whose libc.so is a linker script)."""
    with open("/proc/self/maps") as f:
        for line in f:
            m = re.search(r"(/\S*/libc\.so\.6)$", line.strip())
            if m and os.path.isfile(m.group(1)):
                return m.group(1)
    raise ToolchainError("cannot find this process's libc.so.6 (glibc) to link the ROCm sysdeps shims against")


def _object(ir: str) -> bytes:
    reply = default_pool().call(WorkerSpec.of(sys.executable), "llvm.compile", {
        "ir": ir, "triple": TRIPLE, "cpu": "x86-64", "features": "", "opt": 2, "pipeline": False,
        "reloc": "pic", "codemodel": "default", "emit": "obj"}, timeout=120.0)
    return answer_blob(reply.blob, "llvm.compile")


def build(directory: Path | None = None) -> dict[str, Path]:
    """Build both shims into ``directory`` (default shim_dir()); returns soname -> path.
    Written to a temporary name and renamed, so a worker never loads half a file."""
    d = directory or shim_dir()
    d.mkdir(parents=True, exist_ok=True)
    lld, libc = find_lld(), _libc()
    out: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="rocke-sysdeps-") as tmp:
        for shim in SHIMS:
            obj, vs = Path(tmp) / f"{shim.soname}.o", Path(tmp) / f"{shim.soname}.map"
            obj.write_bytes(_object(shim_ir(shim)))
            vs.write_text(version_script(shim))
            dest = d / shim.soname
            part = d / f".{shim.soname}.part"
            cmd = [lld, "-shared", "--no-undefined", "-soname", shim.soname, "--version-script", str(vs),
                   "-z", "now", "--hash-style=both", str(obj), libc, "-o", str(part)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                part.unlink(missing_ok=True)
                raise ToolchainError(f"linking {shim.soname} failed: {proc.stderr.strip()[-2000:]}")
            os.replace(part, dest)
            out[shim.soname] = dest
    return out
