"""`rocke-aot lower` (print one spec's IR) and `rocke-aot compile` (write its code object).

    --family F --spec JSON --arch A --lane L
        -> lower(F, spec, A, L)                          (aot/lower; refusals before LLVM)
        -> lower: the IR text
        -> compile: toolchains.toolchain_for(L, A).compile(ir, A)   (isolated worker; chosen
                    before lowering by the one chooser the build plan uses too)
                    -> validate (aot/codeobject.py) -> write -o; print metadata (--json)
    compile --ir FILE skips lowering and compiles that IR (the kernel name is then read
    from the code object).
    A Triton family (variants/triton.py) lowers to a Triton compile request, not LLVM IR: the
    toolchain is chosen for the input the family's spec type consumes (``compile_input``:
    "triton"), as the build plan chooses it, so the lane's Triton compiles it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import click

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.families import get_family
from rocke_aot.aot.lower import lower
from rocke_aot.cli.options import (
    arch_option,
    emit_json,
    json_object_arg,
    json_option,
    lanes_option,
    lanes_or_env,
)


def _spec(value: str | None) -> dict:
    return {} if value is None else json_object_arg(value, "--spec")


def _lane(lane):
    lanes = lanes_or_env(lane)
    if not lanes:
        raise click.UsageError("give --lane (or set ROCKE_AOT_LANE)")
    return lanes[0]


def _lower(family, spec, arch, lane):
    return lower(family, _spec(spec), arch, _lane(lane))


_common = [
    click.option("--family", default="gemm", show_default=True, help="Kernel family."),
    click.option("--spec", default=None, metavar="JSON|@FILE",
                 help="The family's spec as a JSON object (fields not given take their defaults)."),
    arch_option("Target ID: gfx942, gfx942:sramecc+:xnack-, gfx1250, sm_90 ...", required=True),
    lanes_option(multiple=False, help="Compiler lane (default: $ROCKE_AOT_LANE)."),
]


def _with_common(fn):
    for opt in reversed(_common):
        fn = opt(fn)
    return fn


@click.command("lower")
@_with_common
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the IR here instead of printing it.")
@json_option
def lower_cmd(family, spec, arch, lane, output, as_json) -> None:
    """Print the LLVM IR of one spec, lowered for ARCH on LANE (deterministic text).

    \b
    Example:
        rocke-aot lower --family gemm --arch gfx942 --lane llvm22 --spec '{"path": "mfma"}'
        rocke-aot lower --arch gfx1250 --lane llvm22 --spec '{"path": "wmma"}' --json | jq .ir_sha256
    """
    kernel = _lower(family, spec, arch, lane)
    if output is not None:
        output.write_text(kernel.ir)
    if as_json:
        emit_json(dict(kernel.as_dict(), ir=None if output else kernel.ir, output=str(output) if output else None))
    elif output is None:
        click.echo(kernel.ir, nl=False)


@click.command("compile")
@_with_common
@click.option("--ir", "ir_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Compile this IR file instead of lowering a spec.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Code object to write (HSACO for AMD, cubin for sm_90; the PTX goes beside it as .ptx).")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=120.0, show_default=True, help="Seconds.")
@json_option
def compile_cmd(family, spec, arch, lane, ir_file, output, timeout, as_json) -> None:
    """Lower one spec, compile it in an isolated worker, validate and write the code object.

    The lane's first toolchain on this host that can target ARCH does the compile
    (`rocke-aot toolchains` lists them; `rocke-aot build` chooses the same way). Prints the code object's metadata: kernel,
    kernargs, VGPR/SGPR/AGPR counts, LDS, scratch, wave size, the user SGPR inputs
    its descriptor enables.

    \b
    Example:
        rocke-aot compile --arch gfx942 --lane llvm22 --spec '{"path": "mfma"}' -o k.hsaco
        rocke-aot compile --arch sm_90 --lane llvm22 -o k.cubin --json
        rocke-aot compile --family triton_matmul --arch gfx942 --lane llvm24 -o mm.hsaco   # Triton 3.9
    """
    lane_obj = _lane(lane)
    if ir_file is not None and spec is not None:
        raise click.UsageError("--ir and --spec exclude each other")
    # Chosen before lowering, by the same function the build plan uses: a (lane, arch) that
    # `rocke-aot build` refuses for want of a toolchain is refused here, with the same message.
    consumes = getattr(get_family(family).spec_type, "compile_input", "llvm-ir")
    tc = tcs.toolchain_for(lane_obj, arch, consumes=consumes)
    if ir_file is not None:
        ir, kernel, kernel_name = ir_file.read_text(), None, None
    else:
        kernel = _lower(family, spec, arch, lane_obj)
        ir, kernel_name = kernel.ir, kernel.kernel_name
    result = tc.compile(ir, arch, timeout=timeout)
    info = validate(result.code_object, arch, kernel=kernel_name)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_bytes(result.code_object)
    os.replace(tmp, output)
    ptx_path = None
    if result.ptx is not None:
        ptx_path = output.with_suffix(".ptx")
        ptx_path.write_text(result.ptx)
    doc = {
        "output": str(output),
        "format": result.format,
        "sha256": hashlib.sha256(result.code_object).hexdigest(),
        "bytes": len(result.code_object),
        "ptx": str(ptx_path) if ptx_path else None,
        "lane": lane_obj.name,
        "toolchain": tc.identity(arch),
        "toolchain_location": tc.detect().location,
        "ir_sha256": hashlib.sha256(ir.encode()).hexdigest(),
        "kernel": kernel.as_dict() if kernel else None,
        "code_object": info.as_dict(),
        "log": result.log,
        "triton": (result.extra or {}).get("triton"),  # a Triton build: its cache entry (shared memory, ...)
    }
    if as_json:
        emit_json(doc)
        return
    click.echo(f"wrote {output} ({result.format}, {len(result.code_object)} bytes, sha256 {doc['sha256'][:16]}...)")
    if ptx_path:
        click.echo(f"wrote {ptx_path}")
    click.echo(f"kernel     {info.kernel}  target {info.target}  lane {lane_obj.name}")
    click.echo(f"toolchain  {tc.kind} {tc.detect().llvm_version} at {tc.detect().location}")
    if info.format == "hsaco":
        kd = info.descriptor
        assert kd is not None, "codeobject.inspect fills the descriptor of every hsaco (or raises)"
        click.echo(f"kernarg    {info.kernarg_size} bytes: " + ", ".join(f"{a.name}@{a.offset}" for a in info.args))
        click.echo(f"registers  vgpr {info.vgpr_count}  agpr {info.agpr_count}  sgpr {info.sgpr_count}  "
                   f"spills v{info.vgpr_spill_count}/s{info.sgpr_spill_count}")
        click.echo(f"memory     lds {info.lds_bytes} B  scratch {info.private_segment_bytes} B/work-item")
        click.echo(f"wave       {info.wavefront_size}  inputs {', '.join(kd.user_sgpr_inputs)}  "
                   f"code object v{info.code_object_version}")
    elif info.format == "cubin":  # what ptxas -v reports, read back from the cubin (aot/codeobject.py)
        click.echo(f"registers  {info.vgpr_count} per thread  barriers {info.barrier_count}  "
                   f"block {info.max_flat_workgroup_size} threads")
        click.echo(f"memory     shared {info.lds_bytes} B  local {info.private_segment_bytes} B/thread")
    if doc["triton"]:
        click.echo(f"triton     {doc['triton']['triton_version']}  shared {doc['triton']['shared']} B (dynamic, "
                   f"launched with the kernel)  warps {doc['triton']['num_warps']}")
    for line in result.log.splitlines():
        click.echo(f"log: {line}", err=True)
