import json, os, resource, time
import pytest
_OUT = os.environ.get("CPULOG", "/tmp/suite_tools/cpu.jsonl")
def _cpu():
    a = resource.getrusage(resource.RUSAGE_SELF); b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _cpu(), time.monotonic()
    yield
    with open(_OUT, "a") as f:
        f.write(json.dumps({"id": item.nodeid, "cpu": round(_cpu() - c0, 3), "wall": round(time.monotonic() - t0, 3),
                            "w": os.environ.get("PYTEST_XDIST_WORKER")}) + "\n")
