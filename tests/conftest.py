"""Shared fixtures: the real toolchains of this host, found once per session.

Tests run against real compilers. When one the suite needs is missing, the
fixture FAILS with the setup command to run: CI runs that setup first, so a
missing toolchain there is a broken setup, never a silent skip.

``pg_server`` (tests/_pg.py) lives here so the whole session shares ONE throwaway
PostgreSQL cluster (a fixture imported into several modules would be one per module).
``kernel_bundle`` (tests/_service.py) and ``wheel`` (tests/_roles.py) likewise, and made once per
run for every pytest-xdist worker (tests/_once.py).
"""

from __future__ import annotations

import pytest
from _pg import pg_server  # noqa: F401 - the session's PostgreSQL server (one per session)
from _roles import wheel  # noqa: F401 - the wheel of this tree (one per run, every worker)
from _service import kernel_bundle  # noqa: F401 - the real 8-kernel build (one per run, every worker)
from _signed import signed_world  # noqa: F401 - tests/test_tuf.py's and tests/test_mirror.py's releases

from rocke_aot.aot import toolchains as tcs
from rocke_aot.lanes import get_lane


@pytest.fixture(scope="session")
def all_toolchains():
    return tcs.detect_all()


def _need_lane(all_toolchains, lane: str):
    found = tcs.toolchains_for_lane(get_lane(lane), all_toolchains)
    if not found:
        pytest.fail(f"no {lane} toolchain on this host: run `bash scripts/setup.sh` "
                    f"(it runs `rocke-aot toolchain install {lane}`)")
    return found[0]


@pytest.fixture(scope="session")
def llvm22(all_toolchains):
    return _need_lane(all_toolchains, "llvm22")


@pytest.fixture(scope="session")
def llvm20(all_toolchains):
    return _need_lane(all_toolchains, "llvm20")


@pytest.fixture
def tmp_home(tmp_path, monkeypatch):
    """An empty ROCKE_AOT_HOME (no registered toolchains, empty default cache)."""
    monkeypatch.setenv("ROCKE_AOT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# Modules of minute-long tests that carry no ``reliability`` mark, started right after those: a
# cold mypy over the product (test_types, near the end of the file order), the wheel's role venvs
# and command walks (test_install_roles, test_packaging), the TUF service round trips (test_tuf);
# then the modules whose single tests ranked longest in bench/results/suite-timing-2026-12-06 (the
# every-lane golden gate, hostile and live-service load, the Triton hosts: the t's were the file
# order's last tests, where one runs alone at the end).
LONG_FIRST = ("test_types.py", "test_install_roles.py", "test_packaging.py", "test_tuf.py", "test_goldens.py",
              "test_triton_travel.py", "test_triton_remote_cache.py", "test_triton_plugin.py",
              "test_hostile_service.py", "test_service_live.py")


def pytest_collection_modifyitems(config, items):
    """The long fault tests (marker ``reliability``: SIGKILL at 20 points, four builders under
    load) first, then the modules of LONG_FIRST, the rest in file order: under pytest-xdist a long
    test started last runs alone at the end while the other worker idles (it added minutes to the
    suite's wall time)."""
    items.sort(key=lambda item: (item.get_closest_marker("reliability") is None,
                                 item.path.name not in LONG_FIRST))
