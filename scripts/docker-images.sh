#!/usr/bin/env bash
# Build both images (Dockerfile targets serve and builder) and run them on a machine with a
# Docker daemon: image sizes, the user id each runs as, a kernel built by the builder image
# into a volume and signed there, served by the serving image (health check), and fetched
# back by a host that pins the root key (signed and verified).
#
#   bash scripts/docker-images.sh [docker build options: --secret id=pipconf,src=pip.conf,
#                                  --build-arg PIP_INDEX_URL=..., --build-arg DEBIAN_IMAGE=...]
#   DOCKER=/usr/bin/docker       the client (default: the first docker on PATH that can drive BuildKit:
#                                one with buildx, or a 18.09-22.x client, which has it built in)
#   TARGETS="serve builder"      which images to build (both by default; the run needs both)
#   LOGS=DIR                     where each build's whole output goes (default: a temp dir)
#   output: one "[docker] ..." line per step; exit 1 at the first step that fails
#
# The demo keeps the keys in the volume to be short; an operator keeps root.key offline and
# gives hosts only root.key.pub (docs/trust.md).
set -euo pipefail
export DOCKER_BUILDKIT=1  # RUN --mount=type=secret needs BuildKit (docker with buildx, or a 20.10 client)
pick_docker() {  # a 23+ client without buildx refuses DOCKER_BUILDKIT=1 builds
  local d v
  for d in $(type -ap docker | xargs -r -n1 realpath | awk '!seen[$0]++'); do
    "$d" buildx version >/dev/null 2>&1 && { echo "$d"; return; }
    v=$("$d" version -f '{{.Client.Version}}' 2>/dev/null | cut -d. -f1 || true)
    [[ $v =~ ^[0-9]+$ ]] && ((v >= 18 && v < 23)) && { echo "$d"; return; }
  done
  echo docker
}
DOCKER=${DOCKER:-$(pick_docker)}
docker() { command "$DOCKER" "$@"; }
cd "$(dirname "$0")/.."
log() { printf '[docker] %s\n' "$*"; }
TAG=${TAG:-rocke-aot-test}
VOL=$TAG-cache
PORT=${PORT:-18080}
V=/var/lib/rocke-aot
CACHE=sqlite:///$V/cache.sqlite
cleanup() { docker rm -f "$TAG-serve" >/dev/null 2>&1 || true; docker volume rm -f "$VOL" >/dev/null 2>&1 || true; }
trap cleanup EXIT
log "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes'), docker $(docker version -f '{{.Server.Version}}') (client $DOCKER)"

LOGS=${LOGS:-$(mktemp -d)}  # each build's own output (BuildKit's progress), shown when it fails
for target in ${TARGETS:-serve builder}; do
  t0=$(date +%s)
  docker build --progress=plain "$@" --target "$target" -t "$TAG-$target" . >"$LOGS/$target.log" 2>&1 \
    || { tail -40 "$LOGS/$target.log"; log "$target: build failed (whole log: $LOGS/$target.log)"; exit 1; }
  grep -hoE '\[(setup|slim)\] .*' "$LOGS/$target.log" | sed "s/^/[docker] $target: /" || true
  size=$(docker image inspect -f '{{.Size}}' "$TAG-$target")
  log "$target: built in $(( $(date +%s) - t0 )) s, $(( size / 1000000 )) MB"
  log "$target: runs as $(docker run --rm --entrypoint id "$TAG-$target")"
done
size=$(docker image inspect -f '{{.Size}}' "$TAG-serve")
(( size < 400000000 )) && log "serve image under 400 MB: yes" || log "serve image under 400 MB: NO"
docker run --rm --entrypoint /opt/rocke-aot/.venv/bin/python "$TAG-serve" -c '
import importlib.util as u, sys
import rocke_aot.service.app, rocke_aot.cli.serve
absent = [m for m in ("pip", "setuptools", "numpy", "llvmlite") if u.find_spec(m)]
heavy = [m for m in ("numpy", "llvmlite", "rocke_aot.aot.builder") if m in sys.modules]
print("[docker] serve: importable but not wanted:", absent or "none", "; imported by the service:", heavy or "none")'

# a bind mount the image user (uid 10001) cannot write: the container stops at start, naming the
# uid and the command that fixes the mount (README, "Docker" quotes this line)
ro=$(mktemp -d); chmod 755 "$ro"
msg=$(docker run --rm -v "$ro:$V" "$TAG-serve" 2>&1 | grep -m1 'CacheAccessError' || true)
rmdir "$ro"
log "serve: an unwritable bind mount stops it with: ${msg:-NO CacheAccessError}"
[[ $msg == *"uid 10001"* && $msg == *"install -d -o 10001 -g 10001"* ]]

docker volume create "$VOL" >/dev/null
run() { docker run --rm -v "$VOL:$V" "$TAG-builder" "$@"; }
run build --arch gfx942 --family gemm --lane llvm22 --where path=fma --where block_m=64 --where block_n=64 \
  --cache "$CACHE" --json >/dev/null
key=$(run cache ls --cache "$CACHE" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["key"])')
log "builder: built kernel $key into the volume"
run trust keygen "$V/root.key" >/dev/null
run trust keygen "$V/release.key" >/dev/null
run trust root --key "$V/root.key" --release "$V/release.key.pub" -o "$V/root.json" >/dev/null
run trust sign --cache "$CACHE" --root "$V/root.json" --key "$V/release.key" -o "$V/signed" --json \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print("[docker] builder: signed TUF timestamp version", d["version"], "of", d["kernels"], "kernels in", d["bins"], "bins,", len(d["generations"]), "generations")'

docker run -d --name "$TAG-serve" -p "127.0.0.1:$PORT:8080" -v "$VOL:$V" "$TAG-serve" \
  --cache "$CACHE" --trust-dir "$V/signed" --host 0.0.0.0 --port 8080 >/dev/null
st=starting
for _ in $(seq 60); do
  st=$(docker inspect -f '{{.State.Health.Status}}' "$TAG-serve")
  [ "$st" = healthy ] && break
  sleep 2
done
log "serve: health $st, /healthz $(python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=5).read().decode())")"
[ "$st" = healthy ]
# a GPU host: pins root.key.pub, fetches through the verifying client into its own local store
docker run --rm --network host -v "$VOL:$V:ro" "$TAG-builder" fetch --server "http://127.0.0.1:$PORT" \
  --root-key "$V/root.key.pub" --local /tmp/client "$key" --json \
  | python3 -c 'import json,sys; a=json.load(sys.stdin); assert not a["failed"], a["failed"]; d=a["kernels"][0]; o=d["origin"]; print("[docker] fetch:", d["key"][:16], d["size"], "bytes, sha256", d["sha256"][:16], "signed:", o["signed"], "snapshot version", o.get("snapshot_version"))'
log "done"
