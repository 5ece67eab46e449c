# syntax=docker/dockerfile:1
# kueue-nats: keeps Kueue ResourceFlavors/ClusterQueues in line with what pools announce.
# Build from the repository root:  docker build -f deploy/docker/controller.Dockerfile -t interlink-nats-controller .
# The base is a build argument pinned by digest; see gateway.Dockerfile for what else works as a base.
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
RUN SETUPTOOLS_SCM_PRETEND_VERSION="${VERSION}" /opt/venv/bin/pip install --no-cache-dir ".[controller]" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="interlink-nats controller (kueue-nats)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 interlink \
 && useradd --system --uid 10001 --gid interlink --home-dir /var/lib/interlink-nats --create-home \
      --shell /usr/sbin/nologin interlink
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/interlink-nats
USER 10001:10001
# Talks to the Kubernetes API and NATS only; Kubernetes watches the process.
HEALTHCHECK NONE
ENTRYPOINT ["interlink-nats"]
CMD ["controller", "run"]
