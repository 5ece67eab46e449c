# syntax=docker/dockerfile:1
# A submitter for one pool, with only the `submitter` extra (no HTTP server, redis, renderer, nats-server or
# Kubernetes client). It runs the `shell` backend: each pod is a bash job inside this container. The compose
# stack sets the pool's runtime to `none` (containers' commands run as processes here, images are not pulled);
# a site with Slurm or HTCondor installs the submitter next to its batch client tools instead
# (docs/site-install.md) or derives from this image and adds them and a container runtime (apptainer).
# Build from the repository root:  docker build -f deploy/docker/submitter.Dockerfile -t interlink-nats-submitter .
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
RUN SETUPTOOLS_SCM_PRETEND_VERSION="${VERSION}" /opt/venv/bin/pip install --no-cache-dir ".[submitter]" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="interlink-nats submitter" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 interlink \
 && useradd --system --uid 10001 --gid interlink --home-dir /var/lib/interlink-nats --create-home \
      --shell /usr/sbin/nologin interlink \
 && install -d -o interlink -g interlink -m 0700 /var/lib/interlink-nats/state
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INTERLINK_SUBMITTER_STATE_DIR=/var/lib/interlink-nats/state
WORKDIR /var/lib/interlink-nats
USER 10001:10001
# Job directories and the SQLite registry: keep them on a volume so a restart resumes tracking.
VOLUME ["/var/lib/interlink-nats/state"]
# A submitter only dials out (NATS); liveness is its NATS connection, which the orchestrator sees as the process.
HEALTHCHECK NONE
ENTRYPOINT ["interlink-nats"]
CMD ["submitter", "shell"]
