import json, os, time
_OUT = os.environ.get("DURLOG", "/tmp/suite_tools/dur.jsonl")
def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(_OUT, "a") as f:
        f.write(json.dumps({"id": report.nodeid, "when": report.when, "d": round(report.duration, 3),
                            "o": report.outcome, "w": getattr(report, "node", None) and str(report.node.gateway.id) if hasattr(report, "node") else None,
                            "t": time.time()}) + "\n")
