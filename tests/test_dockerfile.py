"""The Dockerfile, read by a real parser (dockerfile-parse), and the setup script it shares.

No container daemon runs here, so the image is checked by what it declares:

    Dockerfile ──DockerfileParser──> stages (split at FROM) ──> the final stage:
        uses scripts/setup.sh (build stage AND final stage), with flags setup.sh parses
        USER non-root, created in a RUN before it, never switched back
        EXPOSE == serve's --port == the README's `docker run -p` port
        VOLUME holds the --cache file; HEALTHCHECK fetches /healthz on that port
        ENTRYPOINT + CMD (exec form) run `rocke-aot serve ... --host 0.0.0.0`
        COPY --from the build stage (build tools stay behind)
    scripts/setup.sh --check: nothing missing -> exit 0 "nothing to do"; a missing lane ->
        exit 1 naming it, and nothing installed
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup.sh"


@pytest.fixture(scope="module")
def stages() -> list[list[dict]]:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    out: list[list[dict]] = []
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            out.append([])
        if out and ins["instruction"] != "COMMENT":
            out[-1].append(ins)
    assert len(out) >= 2, "a multi-stage build: build tools stay in the build stage"
    return out


def _all(stage, instruction):
    return [i["value"] for i in stage if i["instruction"] == instruction]


def _exec_form(value: str) -> list[str]:
    argv = json.loads(value)  # exec form: no shell between Docker and the process (signals reach it)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def _command(final) -> list[str]:
    (entry,) = _all(final, "ENTRYPOINT") or [None]
    cmd = _all(final, "CMD")
    return (_exec_form(entry) if entry else []) + (_exec_form(cmd[-1]) if cmd else [])


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _readme_port() -> int:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Docker\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert m, "README has a Docker section"
    ports = re.findall(r"docker run[^\n]*?-p\s+(\d+):(\d+)", m.group(1))
    assert ports, "the README's Docker section shows `docker run -p HOST:CONTAINER`"
    return int(ports[0][1])


def test_setup_script_is_used_with_flags_it_parses(stages):
    setup_src = SETUP.read_text()
    cases = set(re.findall(r"^\s+(--[a-z-]+)(?:\|[^)]*)?\)", setup_src, re.MULTILINE))
    uses = [v for stage in stages for v in _all(stage, "RUN") if "scripts/setup.sh" in v]
    assert any("scripts/setup.sh" in v for v in _all(stages[0], "RUN")), "the build stage runs setup.sh"
    assert any("scripts/setup.sh" in v for v in _all(stages[-1], "RUN")), "the final stage checks with setup.sh"
    for run in uses:
        for part in run.split("&&"):
            words = shlex.split(part)
            if "scripts/setup.sh" in words:
                for w in words[words.index("scripts/setup.sh") + 1 :]:
                    if w.startswith("--"):
                        assert w in cases, f"setup.sh does not parse {w}"
    assert any("--check" in v for v in _all(stages[-1], "RUN")), "the final stage verifies the copied tree"
    assert any(v.startswith("--from=") for v in _all(stages[-1], "COPY")), "the final stage copies from the build"


def test_runs_as_a_non_root_user_it_creates(stages):
    final = stages[-1]
    users = _all(final, "USER")
    assert users, "USER is set in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and not user.startswith("0"), user
    created = [v for v in _all(final, "RUN") if re.search(rf"\buseradd\b[^&]*\b{re.escape(user)}\b", v)]
    assert created, f"user {user} is created in the final stage"
    idx = [i for i, ins in enumerate(final) if ins["instruction"] == "USER"][-1]
    later = [ins["instruction"] for ins in final[idx + 1 :]]
    assert "RUN" not in later, "nothing runs as root after USER"


def test_serve_command_port_volume_and_health(stages):
    final = stages[-1]
    argv = _command(final)
    assert Path(argv[0]).name == "rocke-aot" and argv[1] == "serve", argv
    assert _flag(argv, "--host") == "0.0.0.0"  # reachable through -p; the service binds loopback by default
    port = int(_flag(argv, "--port"))
    exposed = {int(p.split("/")[0]) for v in _all(final, "EXPOSE") for p in v.split()}
    assert exposed == {port} == {_readme_port()}
    volumes = [p for v in _all(final, "VOLUME") for p in (json.loads(v) if v.startswith("[") else v.split())]
    cache = _flag(argv, "--cache")
    assert cache.startswith("sqlite:///")
    assert any(Path(cache[len("sqlite:///"):]).is_relative_to(v) for v in volumes), (cache, volumes)
    (health,) = _all(final, "HEALTHCHECK")
    assert f"127.0.0.1:{port}/healthz" in health and "CMD" in health


def test_build_context_leaves_out_local_state():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    for entry in (".venv", ".git", "tests"):
        assert entry in ignored
    for needed in ("README.md", "pyproject.toml", "scripts", "scripts/setup.sh"):
        assert needed not in ignored  # pyproject's readme and the setup script go in


# ---- the setup script itself ------------------------------------------------------------

def _setup(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SETUP), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


def test_setup_check_names_what_is_missing_and_installs_nothing(tmp_path):
    home = tmp_path / "home"
    p = _setup("--check", "--only", "lanes", env={"ROCKE_AOT_HOME": str(home), "ROCKE_AOT_SETUP_LANES": "llvm20"})
    assert p.returncode == 1, p.stderr
    assert "lanes: would install lane toolchains llvm20" in p.stderr and "--check changed nothing" in p.stderr
    assert not (home / "lanes").exists() and not (home / "toolchains.json").exists()


def test_setup_second_run_says_nothing_to_do(tmp_path):
    # apt: this machine has the image's runtime packages (CI ran setup.sh before the tests).
    p = _setup("--image", "--only", "apt", "--check")
    assert p.returncode == 0, p.stderr
    assert re.search(r"apt: nothing to do, apt packages present \(.*lld-22.*\) \(\d+\.\d s\)", p.stderr), p.stderr
    assert "nothing to do: apt packages present" in p.stderr
    # lanes: with nothing requested there is nothing to install either (a per-step timing).
    p = _setup("--only", "lanes", env={"ROCKE_AOT_HOME": str(tmp_path), "ROCKE_AOT_SETUP_LANES": ""})
    assert p.returncode == 0 and "lanes: nothing to do" in p.stderr, p.stderr


def test_setup_rejects_unknown_arguments():
    p = _setup("--imgae")
    assert p.returncode == 2 and "unknown argument --imgae" in p.stderr


# ---- two images, issue 23 ---------------------------------------------------------------

def _named(stages) -> dict[str, list[dict]]:
    out = {}
    for stage in stages:
        m = re.search(r"\bAS\s+(\S+)", stage[0]["value"], re.IGNORECASE)
        out[m.group(1) if m else str(len(out))] = stage
    return out


def test_no_syntax_line_so_no_frontend_image_is_pulled():
    first = (ROOT / "Dockerfile").read_text().lstrip().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.IGNORECASE), first


def test_a_serving_image_and_a_builder_image_from_the_same_script(stages):
    named = _named(stages)
    assert {"build", "serve-build", "builder", "serve"} <= set(named)
    assert list(named)[-1] == "serve"  # the default target is the serving image
    for final, flag, source in (("builder", "--image", "build"), ("serve", "--serve-image", "serve-build")):
        st = named[final]
        runs = _all(st, "RUN")
        assert any(f"scripts/setup.sh {flag} --only apt" in r for r in runs), final
        assert f"--from={source} " in " ".join(_all(st, "COPY")) + " ", final
        (user,) = {u.split(":")[0] for u in _all(st, "USER")}
        created = " ".join(r for r in runs if "useradd" in r)
        uid = re.search(rf"useradd[^&]*--uid (\d+)[^&]*\b{user}\b", created)
        gid = re.search(rf"groupadd[^&]*--gid (\d+)[^&]*\b{user}\b", created)
        assert uid and gid and uid.group(1) == gid.group(1) == "10001", created  # fixed: README's bind mount
        # the self-check runs as the image's user (a root-only registry would pass as root)
        assert any(re.search(rf"runuser -u {user} -- bash scripts/setup.sh {flag} --check", r) for r in runs), final
    build_runs = " ".join(_all(named["serve-build"], "RUN"))
    assert "--serve-image" in build_runs and "--image " not in build_runs + " "


def test_package_index_settings_never_reach_a_final_image(stages):
    named = _named(stages)
    for name in ("build", "serve-build"):
        assert any("PIP_INDEX_URL" in a for a in _all(named[name], "ARG")), name
        assert any("--mount=type=secret,id=pipconf" in r for r in _all(named[name], "RUN")), name
    for name in ("builder", "serve"):
        st = named[name]
        text = " ".join(i["value"] for i in st if i["instruction"] in ("ARG", "ENV", "RUN", "LABEL"))
        assert "PIP_INDEX_URL" not in text and "pip.conf" not in text, name
