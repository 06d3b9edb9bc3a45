#!/usr/bin/env bash
# Fill .whl/ with the wheels a GPU machine lacks (its python3.12 has torch, triton, llvmlite,
# numpy and cuda-bindings; scripts/gpu-site.sh installs .whl/ and the project from them), at the
# versions of this machine's .venv, for CPython 3.12 on manylinux x86_64. The device call's tree
# (tracked files + carried .whl/) must stay under 64 MiB: pygments and the test tools are left out
# unless --tests (scripts/gpu-tests.sh needs pytest and pytest-xdist).
# Usage: bash scripts/gpu-wheels.sh [--tests]; then carry ".whl" in the device call.
set -eo pipefail
cd "$(dirname "$0")/.."
# the base install, [serve] (uvicorn runs the httptools protocol; fastapi imports opentelemetry-api),
# the signed mirror (tuf, securesystemslib) and the client's progress (rich)
RE="fastapi|starlette|pydantic|pydantic.core|uvicorn|httptools|sqlalchemy|alembic|mako|markupsafe|annotated.types|annotated.doc"
RE+="|typing.inspection|typing.extensions|greenlet|zstandard|pyelftools|platformdirs|prometheus.client|httpx|httpcore|h11"
RE+="|anyio|sniffio|idna|certifi|msgpack|rich|markdown.it.py|mdurl|click|cryptography|cffi|pycparser|opentelemetry.api"
RE+="|importlib.metadata|zipp|tuf|securesystemslib"
[ "${1:-}" = "--tests" ] && RE+="|pytest|pytest.xdist|execnet|iniconfig|pluggy|packaging|pygments"
PKGS=$(.venv/bin/python -m pip freeze 2>/dev/null | grep -i -E "^($RE)==")
rm -rf .whl && mkdir -p .whl
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
    -d .whl $PKGS
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
