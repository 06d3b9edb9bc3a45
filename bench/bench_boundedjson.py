"""What the bounded JSON reader costs on hostile documents, against json.loads (whole-run figures).

    python bench/bench_boundedjson.py > bench/results/boundedjson-<date>.txt

Each case runs in a fresh child process (peak RSS growth = ru_maxrss after - before):
json.loads of the document (the reference) and rocke_aot.boundedjson.loads with the figures the
service and bundle import use. Nothing is asserted: the numbers go to docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from rocke_aot import boundedjson
from rocke_aot.cache import bundle
which, case = sys.argv[1], sys.argv[2]
data = {"15MiB-objects": b"[" + b"{}," * (5 << 20) + b"{}]",
        "60MiB-objects": b"[" + b"{}," * (20 << 20) + b"{}]",
        "deep-1MiB": b"[" * (1 << 20) + b"]" * (1 << 20)}[case]
limits = {"service": boundedjson.Limits(16 << 20, 34, 100_000, 16 << 20), "manifest": bundle.MANIFEST_LIMITS}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    if which == "json":
        json.loads(data); out = "parsed"
    else:
        boundedjson.loads(data, limits[which]); out = "parsed"
except RecursionError:
    out = "RecursionError"
except boundedjson.JSONLimitError as e:
    out = "refused:" + e.limit
print(json.dumps({"reader": which, "case": case, "outcome": out, "seconds": round(time.perf_counter() - t, 3),
                  "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024}))
"""

for case in ("15MiB-objects", "60MiB-objects", "deep-1MiB"):
    for which in ("json", "service", "manifest"):
        p = subprocess.run([sys.executable, "-c", CHILD, which, case], capture_output=True, text=True, timeout=600)
        print(p.stdout.strip() or json.dumps({"reader": which, "case": case, "exit": p.returncode,
                                               "stderr": p.stderr[-200:]}))
