# rocke-aot's two images from one script (scripts/setup.sh):
#
#   builder   the lanes of --build-arg LANES (default "llvm20 llvm23 llvm24"; llvm22 is the venv's
#             own llvmlite): Debian + setup.sh --image (runtime apt packages, the venv with [all],
#             ptxas and cuobjdump, the lane toolchains), then the copied tree checked by the same
#             script and scripts/image-check.sh as uid 10001 (every default command; nothing
#             written outside its home and the cache volume). A lane whose interpreter the base
#             lacks is refused by name at once: triton-3.6.0-py3.12 needs python3.12, which
#             bookworm lacks (a base that has it: --build-arg DEBIAN_IMAGE=... --build-arg LANES=...)
#   serve     only what `rocke-aot serve` needs: setup.sh --serve-image (python3, the venv with
#             [serve]; no compiler, no ptxas, no lanes, no numpy), then scripts/slim-venv.sh (no
#             pip/setuptools, stripped shared objects, byte code compiled once). The last stage:
#             the default target
#
#   docker build --target serve -t rocke-aot-serve .
#   docker build --target builder -t rocke-aot-builder .
#   docker run -d -p 8080:8080 -v rocke-aot-cache:/var/lib/rocke-aot rocke-aot-serve
#
# A site's package index: --build-arg PIP_INDEX_URL=https://... (build stages only, never in
# a final image), or its whole pip configuration (index URL, CA certificate, credentials) as a
# build secret: --secret id=pipconf,src=pip.conf (mounted as /etc/pip.conf for the pip steps,
# never written to a layer), and a CA certificate as --secret id=pipca,src=ca.pem (at
# /run/secrets/pipca: say `cert = /run/secrets/pipca` in that pip.conf). Needs BuildKit. Both images run as rocke, uid 10001 / gid 10001 (a bind-mounted
# cache directory must be writable by that uid: README, "Docker").
ARG DEBIAN_IMAGE=debian:bookworm-slim

ARG LANES="llvm20 llvm23 llvm24"

FROM ${DEBIAN_IMAGE} AS build
ARG PIP_INDEX_URL=
ARG LANES
ENV ROCKE_AOT_HOME=/opt/rocke-aot/home \
    PIP_NO_CACHE_DIR=1
WORKDIR /opt/rocke-aot
COPY . .
RUN --mount=type=secret,id=pipconf,target=/etc/pip.conf --mount=type=secret,id=pipca \
    if [ -n "$PIP_INDEX_URL" ]; then export PIP_INDEX_URL; else unset PIP_INDEX_URL; fi \
    && ROCKE_AOT_SETUP_LANES="$LANES" bash scripts/setup.sh --image

FROM ${DEBIAN_IMAGE} AS serve-build
ARG PIP_INDEX_URL=
ENV PIP_NO_CACHE_DIR=1
WORKDIR /opt/rocke-aot
COPY . .
RUN --mount=type=secret,id=pipconf,target=/etc/pip.conf --mount=type=secret,id=pipca \
    if [ -n "$PIP_INDEX_URL" ]; then export PIP_INDEX_URL; else unset PIP_INDEX_URL; fi \
    && bash scripts/setup.sh --serve-image \
    && apt-get install -y -q --no-install-recommends binutils >/dev/null \
    && bash scripts/slim-venv.sh .venv \
    && rm -rf tests bench docs .git

FROM ${DEBIAN_IMAGE} AS builder
ARG LANES
ENV ROCKE_AOT_HOME=/opt/rocke-aot/home \
    ROCKE_AOT_SETUP_LANES=$LANES \
    PATH=/opt/rocke-aot/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/rocke-aot
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh --image --only apt \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=build /opt/rocke-aot /opt/rocke-aot
RUN groupadd --system --gid 10001 rocke \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rocke-aot --shell /usr/sbin/nologin rocke \
    && mkdir -p /var/lib/rocke-aot \
    && chown rocke:rocke /var/lib/rocke-aot \
    && rocke-aot toolchains --json >/dev/null \
    && runuser -u rocke -- bash scripts/setup.sh --image --check \
    && runuser -u rocke -- bash scripts/image-check.sh
VOLUME ["/var/lib/rocke-aot"]
USER rocke
ENTRYPOINT ["/opt/rocke-aot/.venv/bin/rocke-aot"]
CMD ["toolchains"]

FROM ${DEBIAN_IMAGE} AS serve
ENV PATH=/opt/rocke-aot/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/rocke-aot
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh --serve-image --only apt \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=serve-build /opt/rocke-aot /opt/rocke-aot
RUN groupadd --system --gid 10001 rocke \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rocke-aot --shell /usr/sbin/nologin rocke \
    && mkdir -p /var/lib/rocke-aot \
    && chown rocke:rocke /var/lib/rocke-aot \
    && runuser -u rocke -- bash scripts/setup.sh --serve-image --check
VOLUME ["/var/lib/rocke-aot"]
USER rocke
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/rocke-aot/.venv/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["/opt/rocke-aot/.venv/bin/rocke-aot", "serve"]
CMD ["--cache", "sqlite:////var/lib/rocke-aot/cache.sqlite", "--create", "--host", "0.0.0.0", "--port", "8080"]
