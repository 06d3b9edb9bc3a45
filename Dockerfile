# syntax=docker/dockerfile:1
# rocke-aot's artifact service over a cache volume.
#
#   build stage    Debian + scripts/setup.sh --image: runtime apt packages, the venv (pip
#                  downloads and wheel builds happen here), ptxas, the lane toolchains
#   runtime stage  the same Debian + setup.sh --image --only apt (runtime packages only, no
#                  apt lists), then /opt/rocke-aot copied from the build stage, and
#                  setup.sh --image --check: the copied tree must be complete by the SAME
#                  script's checks, so the image and the README's setup cannot drift
#
#   docker build -t rocke-aot .
#   docker run -d -p 8080:8080 -v rocke-aot-cache:/var/lib/rocke-aot rocke-aot
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
ENV ROCKE_AOT_HOME=/opt/rocke-aot/home \
    PIP_NO_CACHE_DIR=1
WORKDIR /opt/rocke-aot
COPY . .
RUN bash scripts/setup.sh --image

FROM ${DEBIAN_IMAGE} AS runtime
ENV ROCKE_AOT_HOME=/opt/rocke-aot/home \
    PATH=/opt/rocke-aot/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/rocke-aot
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh --image --only apt \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=build /opt/rocke-aot /opt/rocke-aot
RUN bash scripts/setup.sh --image --check \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/rocke-aot --shell /usr/sbin/nologin rocke \
    && mkdir -p /var/lib/rocke-aot \
    && chown rocke:rocke /var/lib/rocke-aot
VOLUME ["/var/lib/rocke-aot"]
USER rocke
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/rocke-aot/.venv/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["/opt/rocke-aot/.venv/bin/rocke-aot", "serve"]
CMD ["--cache", "sqlite:////var/lib/rocke-aot/cache.sqlite", "--create", "--host", "0.0.0.0", "--port", "8080"]
