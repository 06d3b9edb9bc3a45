#!/usr/bin/env bash
# Build both images (Dockerfile targets serve and builder) and run them on a machine with a
# Docker daemon: image sizes, the user id each runs as, a kernel built by the builder image
# into a volume, served by the serving image (health check), and fetched back verified.
#
#   bash scripts/docker-images.sh [--secret id=pipconf,src=pip.conf | --build-arg PIP_INDEX_URL=...]
#   output: one "[docker] ..." line per step; exit 1 at the first step that fails
set -euo pipefail
export DOCKER_BUILDKIT=1  # RUN --mount=type=secret needs BuildKit (docker with buildx, or a 20.10 client)
docker() { command "${DOCKER:-docker}" "$@"; }  # DOCKER=/usr/bin/docker: another client
cd "$(dirname "$0")/.."
log() { printf '[docker] %s\n' "$*"; }
TAG=${TAG:-rocke-aot-test}
VOL=$TAG-cache
PORT=${PORT:-18080}
cleanup() { docker rm -f "$TAG-serve" >/dev/null 2>&1 || true; docker volume rm -f "$VOL" >/dev/null 2>&1 || true; }
trap cleanup EXIT

for target in serve builder; do
  t0=$(date +%s)
  docker build "$@" --target "$target" -t "$TAG-$target" . >/dev/null
  size=$(docker image inspect -f '{{.Size}}' "$TAG-$target")
  log "$target: built in $(( $(date +%s) - t0 )) s, $(( size / 1000000 )) MB"
  log "$target: runs as $(docker run --rm --entrypoint id "$TAG-$target")"
done
size=$(docker image inspect -f '{{.Size}}' "$TAG-serve")
(( size < 400000000 )) && log "serve image under 400 MB: yes" || log "serve image under 400 MB: NO"

docker volume create "$VOL" >/dev/null
docker run --rm -v "$VOL:/var/lib/rocke-aot" "$TAG-builder" \
  build --arch gfx942 --family gemm --lane llvm22 --where path=fma --where block_m=64 --where block_n=64 \
  --cache sqlite:////var/lib/rocke-aot/cache.sqlite --json >/dev/null
key=$(docker run --rm -v "$VOL:/var/lib/rocke-aot" "$TAG-builder" \
  cache ls --cache sqlite:////var/lib/rocke-aot/cache.sqlite --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["key"])')
log "builder: built kernel $key into the volume"

docker run -d --name "$TAG-serve" -p "127.0.0.1:$PORT:8080" -v "$VOL:/var/lib/rocke-aot" "$TAG-serve" >/dev/null
for _ in $(seq 60); do
  st=$(docker inspect -f '{{.State.Health.Status}}' "$TAG-serve")
  [ "$st" = healthy ] && break
  sleep 2
done
log "serve: health $st"
[ "$st" = healthy ]
docker run --rm --network host "$TAG-builder" fetch --insecure --server "http://127.0.0.1:$PORT" "$key" --json \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print("[docker] fetch:", d["key"], d["size"], "bytes, sha256", d["sha256"])'
log "done"
