#!/usr/bin/env bash
# Same specs on two machines: this host and the builder image (issue 44). Builds one small gemm
# set for an AMD and an NVIDIA target on every lane both have, each into its own SQLite store,
# then compares, per (arch, lane, spec), the plan key, the code-object key and the stored
# bytes' sha256, and names the identity fields that differ per (lane, format).
#
#   bash bench/keys_host_image.sh [IMAGE]     IMAGE: the builder image (default rocke-aot-test-builder,
#                                             the tag scripts/docker-images.sh gives it)
#   DOCKER=/usr/bin/docker                    the client (any: only `docker run` is used)
#   output: one JSON document on stdout; keep it under bench/results/
#
# The claim it measures: a key equal on both machines means equal bytes, and an AMD kernel's
# key is equal wherever its LLVM and linker are (another CUDA install moves none).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-rocke-aot-test-builder}
DOCKER=${DOCKER:-docker}
d=$(mktemp -d)
trap 'rc=$?; ((rc)) && for f in "$d"/*.err; do echo "== $f" >&2; tail -n 5 "$f" >&2; done; rm -rf "$d"' EXIT
install -d -o 10001 -g 10001 "$d/image"
ARGS=(build --arch gfx942 --arch sm_90 --family gemm --where path=fma --where block_m=64 --where block_n=64
      --where block_k=32 --where waves=4 --json)
t0=$(date +%s.%N)
# a build with failures exits 1 and still prints its summary: the failures are part of the result
.venv/bin/rocke-aot "${ARGS[@]}" --cache "sqlite:///$d/host.sqlite" > "$d/host.json" 2>"$d/host.err" || true
t1=$(date +%s.%N)
"$DOCKER" run --rm -v "$d/image:/var/lib/rocke-aot" "$IMAGE" "${ARGS[@]}" \
  --cache sqlite:////var/lib/rocke-aot/image.sqlite > "$d/image.json" 2>"$d/image.err" || true
t2=$(date +%s.%N)
.venv/bin/python - "$d" "$IMAGE" "$t0" "$t1" "$t2" <<'PY'
import json, platform, sqlite3, sys
from collections import Counter

d, image, t0, t1, t2 = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])

def rows(path):
    con = sqlite3.connect(path)
    out = {}
    for arch, lane, spec, key, code_key, blob, tc in con.execute(
            "SELECT arch, lane, spec_json, key, code_key, blob_sha256, toolchain_json FROM artifacts WHERE status = 'ok'"):
        out[(arch, lane, spec)] = (key, code_key, blob, json.loads(tc))
    return out

host, img = rows(f"{d}/host.sqlite"), rows(f"{d}/image/image.sqlite")
common = sorted(set(host) & set(img))
per = {}
sound = True
diff_fields = {}
for arch, lane, spec in common:
    h, i = host[(arch, lane, spec)], img[(arch, lane, spec)]
    fmt = "hsaco" if arch.startswith("gfx") else "cubin"
    c = per.setdefault(f"{lane} {fmt}", Counter())
    c["specs"] += 1
    c["plan_key_equal"] += h[0] == i[0]
    c["code_key_equal"] += h[1] == i[1]
    c["bytes_equal"] += h[2] == i[2]
    if (h[0] == i[0] or h[1] == i[1]) and h[2] != i[2]:
        sound = False  # one key, two byte strings: the failure a cache must never have
    fields = sorted(k for k in set(h[3]) | set(i[3]) if h[3].get(k) != i[3].get(k))
    diff_fields[f"{lane} {fmt}"] = {k: [h[3].get(k), i[3].get(k)] for k in fields}
hs, ims = json.load(open(f"{d}/host.json")), json.load(open(f"{d}/image.json"))
print(json.dumps({
    "bench": "keys_host_image", "image": image, "host": platform.node(),
    "host_seconds": round(t1 - t0, 1), "image_seconds": round(t2 - t1, 1),
    "host_built": hs["built"], "image_built": ims["built"], "host_failed": len(hs["failed"]),
    "image_failed": len(ims["failed"]), "host_lanes": hs["lanes"], "image_lanes": ims["lanes"],
    "failures": {side: dict(Counter(f"{f['arch']} {f['lane']}: {f['error'][:160]}" for f in s["failed"]))
                 for side, s in (("host", hs), ("image", ims))},
    "compared": len(common), "only_host": len(set(host) - set(img)), "only_image": len(set(img) - set(host)),
    "per_lane_format": {k: dict(v) for k, v in sorted(per.items())},
    "identity_fields_that_differ": diff_fields,
    "no_key_names_two_byte_strings": sound,
}, indent=1, sort_keys=True))
PY
