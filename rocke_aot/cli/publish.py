"""`rocke-aot publish --server URL --token T --arch A --lane L --family F --spec JSON ... FILE`.

    FILE + key inputs ──KeyInputs──> key ──ServiceClient.publish──> PUT /v1/kernels/{key}
    (the server checks the token, the sha256, the key and the code object for the arch;
     409 when the key holds other bytes)
"""

from __future__ import annotations

from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cache.codec import sha256_hex
from rocke_aot.cache.keys import KeyInputs
from rocke_aot.cli.options import arch_option, emit_json, json_object_arg, json_option, lanes_option
from rocke_aot.client.service import ServiceClient


@click.command("publish")
@click.option("--server", required=True, metavar="URL", envvar=settings.SERVER, help="Service base URL.")
@click.option("--token", default=None, envvar=settings.TOKEN, help=f"Publish token (or ${settings.TOKEN}).")
@arch_option("Target ID the code object was built for.", required=True)
@lanes_option(multiple=False, help="Compiler lane that built it.", required=True)
@click.option("--profile", default=None, help="Emission profile (default: the lane's).")
@click.option("--family", required=True, help="Kernel family, e.g. gemm.")
@click.option("--spec", "spec", required=True, metavar="JSON|@FILE", help="The spec (a JSON object).")
@click.option("--recipe-digest", required=True, help="Recipe digest of the lowering that produced it.")
@click.option("--toolchain", required=True, metavar="JSON|@FILE", help="Toolchain identity (a JSON object).")
@click.option("--options", "options", default="{}", metavar="JSON|@FILE", help="Compile options (a JSON object).")
@click.option("--ir-sha256", required=True, help="sha256 of the LLVM IR it was compiled from.")
@click.option("--metadata", default=None, metavar="JSON|@FILE", help="Builder metadata (a JSON object).")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@json_option
def publish(server, token, arch, lane, profile, family, spec, recipe_digest, toolchain, options, ir_sha256, metadata,
            file, as_json) -> None:
    """Publish a code object FILE to a service under the key of its inputs.

    \b
    Example:
        ROCKE_AOT_TOKEN=... rocke-aot publish --server http://127.0.0.1:8080 --arch gfx942 \\
            --lane llvm22 --family gemm --spec @spec.json --recipe-digest 9c1e... \\
            --toolchain @toolchain.json --ir-sha256 5a7b... kernel.hsaco
    """
    code = Path(file).read_bytes()
    inputs = KeyInputs(arch.id, lane.name, profile or lane.profile_name, family, json_object_arg(spec, "--spec"),
                       recipe_digest, json_object_arg(toolchain, "--toolchain"), json_object_arg(options, "--options"))
    with ServiceClient(server, token=token, offline=False) as client:
        out = client.publish(inputs, code, ir_sha256=ir_sha256,
                             metadata=json_object_arg(metadata, "--metadata") if metadata else {},
                             provenance={"published_from": str(Path(file).name), "sha256": sha256_hex(code)})
    if as_json:
        emit_json(out)
    else:
        k = out["kernel"]
        click.echo(f"{'published' if out['created'] else 'already there'}: {k['key']}  sha256 {k['sha256']}")
