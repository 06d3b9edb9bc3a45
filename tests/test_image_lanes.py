"""The builder image's lanes: chosen by a build argument, checked against the interpreters the
base provides before anything installs (issue 44: Debian bookworm has no python3.12, which the
triton-3.6.0-py3.12 lane needs, and the build failed after minutes of installs).

    Dockerfile ARG LANES ──> build stage: ROCKE_AOT_SETUP_LANES="$LANES" setup.sh --image
                        └──> builder stage: ENV ROCKE_AOT_SETUP_LANES (its setup.sh --check checks the same set)
    setup.sh preflight: a triton-X-pyY.Z lane with no pythonY.Z (and not installed) -> exit 2 naming it
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parent.parent


def _stages():
    out, pre = [], []
    for ins in DockerfileParser(path=str(ROOT / "Dockerfile")).structure:
        if ins["instruction"] == "FROM":
            out.append([])
        (out[-1] if out else pre).append(ins)
    return pre, out


def test_lanes_are_a_build_argument_that_reaches_setup_and_its_check():
    pre, stages = _stages()
    (default,) = [re.fullmatch(r'LANES="([^"]*)"', i["value"]).group(1) for i in pre
                  if i["instruction"] == "ARG" and i["value"].startswith("LANES=")]
    assert default.split() == ["llvm20", "llvm23", "llvm24"]  # bookworm has no python3.12: no triton-3.6.0-py3.12
    build = stages[0]
    assert any(i["instruction"] == "ARG" and i["value"] == "LANES" for i in build)
    assert any('ROCKE_AOT_SETUP_LANES="$LANES" bash scripts/setup.sh --image' in i["value"]
               for i in build if i["instruction"] == "RUN")
    builder = next(s for s in stages if "AS builder" in s[0]["value"])
    assert any(i["instruction"] == "ENV" and "ROCKE_AOT_SETUP_LANES=$LANES" in i["value"] for i in builder)
    runs = " ".join(i["value"] for i in builder if i["instruction"] == "RUN")
    assert "runuser -u rocke -- bash scripts/setup.sh --image --check" in runs
    assert "runuser -u rocke -- bash scripts/image-check.sh" in runs


def test_a_lane_whose_interpreter_is_missing_is_refused_by_name_before_any_install(tmp_path):
    env = {**os.environ, "ROCKE_AOT_SETUP_LANES": "llvm20 triton-3.6.0-py3.99", "ROCKE_AOT_HOME": str(tmp_path)}
    p = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--image"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "refusing lane triton-3.6.0-py3.99: it needs python3.99, which this machine lacks" in p.stderr
    assert "--build-arg LANES=" in p.stderr
    assert "[setup] apt" not in p.stderr and "[setup] venv" not in p.stderr  # refused first, nothing ran
    assert list(tmp_path.iterdir()) == []
