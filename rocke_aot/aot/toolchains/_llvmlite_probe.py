"""Standalone probe run under any interpreter that has llvmlite (stdlib + llvmlite only).

Prints one JSON object: llvmlite and LLVM versions, the libllvmlite path, and for each processor asked
for, the datalayout its target machine reports and whether LLVM recognizes the
processor (LLVM only warns on stderr "is not a recognized processor" and goes
on, so fd 2 is captured around each target-machine creation).

    python _llvmlite_probe.py '{"amdgcn-amd-amdhsa": ["gfx942", ...], "nvptx64-nvidia-cuda": ["sm_90"]}'
"""

import json
import os
import sys
import tempfile


def _capture_fd2(fn):
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode("utf-8", "replace")


def _library_path(llvm):
    """The libllvmlite shared library this interpreter loads (its sha256 goes into the key)."""
    try:
        return os.path.realpath(llvm.ffi.lib._name)  # the path handed to ctypes.CDLL
    except Exception:  # a future llvmlite without it: the identity then refuses, naming this
        return None


def main() -> None:
    wanted = json.loads(sys.argv[1])
    import llvmlite
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    out = {
        "llvmlite_version": llvmlite.__version__,
        "llvm_version": ".".join(str(x) for x in llvm.llvm_version_info),
        "llvm_major": llvm.llvm_version_info[0],
        "library": _library_path(llvm),
        "targets": {},
    }
    for triple, cpus in wanted.items():
        try:
            target = llvm.Target.from_triple(triple)
        except RuntimeError as e:
            for cpu in cpus:
                out["targets"][cpu] = {"known": False, "error": str(e)}
            continue
        for cpu in cpus:
            tm, err = _capture_fd2(lambda: target.create_target_machine(cpu=cpu, opt=3))
            known = "not a recognized processor" not in err
            out["targets"][cpu] = {
                "known": known,
                "datalayout": str(tm.target_data),
                "stderr": err.strip(),
            }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
