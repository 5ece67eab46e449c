# The two commands of the README:
#   make up    create/refresh the virtualenv with what `up` runs (.[all]), run `interlink-nats up` (nats-server +
#              gateway + shell submitter); options pass through: make up ARGS="--http-port 4100"
#   make test  the virtualenv with the development tools too (.[all,dev]), the system packages the tests need
#              (where it can install them), then pytest
#   make dist  the wheel and sdist a site installs from (dist/), versioned from the git tag (docs/site-install.md);
#              needs only `build` and setuptools-scm in the virtualenv, prints the two files it wrote
#   make images  the gateway, controller and submitter images of deploy/docker/, tagged with the version:
#              make images REGISTRY=registry.example.org/interlink-nats [PYTHON_IMAGE=…] [CONTAINER_ENGINE=podman]
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-all
DEV_STAMP := $(VENV)/.installed-dev
RELEASE_STAMP := $(VENV)/.installed-release
DIST ?= dist
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
SYSTEM_PACKAGES := redis-server slurm-wlm munge podman runc busybox-static debootstrap
PYTEST_ARGS ?=
ARGS ?=

.PHONY: up test venv dev-venv release-tools dist images $(addprefix image-,$(IMAGES)) system-packages check lint gen bench clean

up: venv
	$(BIN)/interlink-nats up $(ARGS)

test: dev-venv system-packages
	$(BIN)/python -m pytest $(PYTEST_ARGS)

venv: $(STAMP)
dev-venv: $(DEV_STAMP)
release-tools: $(RELEASE_STAMP)

# Two stamps: `up` needs only .[all]; the dev tools (mypy, htcondor, podman-compose, schemathesis…) come with
# `make test`, whose stamp also satisfies `up` (.[all,dev] holds .[all]), so switching costs nothing.
# setuptools' editable-build chatter goes to the log, shown only when the install fails.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing interlink-nats[all] into $(VENV) (log: $(VENV)/install.log)"
	@$(PIP) -e ".[all]" >$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

$(DEV_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing interlink-nats[all,dev] into $(VENV) (log: $(VENV)/install.log)"
	@$(PIP) -e ".[all,dev]" >$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@ln -sf "$(CURDIR)/proto/plugins/protoc-gen-python_fastwire" $(BIN)/protoc-gen-python_fastwire
	@touch $(DEV_STAMP) $(STAMP) $(RELEASE_STAMP)

# What `dist` and `images` need, and nothing else: `build` and setuptools-scm (the version from the git tag).
$(RELEASE_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing build and setuptools-scm into $(VENV) (log: $(VENV)/install.log)"
	@$(PIP) "build>=1" "setuptools-scm>=8" >$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(RELEASE_STAMP)

# The release files: dist/interlink_nats-<version>-py3-none-any.whl and the sdist (docs/site-install.md).
# build's output (about a thousand lines) goes to the log, shown only when the build fails; the files are printed.
dist: $(RELEASE_STAMP)
	@rm -rf $(DIST)
	@echo "building the wheel and sdist (log: $(VENV)/dist.log)"
	@$(BIN)/python -m build --outdir $(DIST) . >$(VENV)/dist.log 2>&1 || { cat $(VENV)/dist.log; exit 1; }
	@ls -1 $(DIST)/*.whl $(DIST)/*.tar.gz

# The images of deploy/docker/ (the Dockerfiles the compose stack builds), named as deploy/kubernetes/ names them:
# $(REGISTRY)/<process>:<version>, the version of setuptools-scm (what `interlink-nats --version` says in the
# image) with `+` made `-` (a tag allows no `+`). A site builds with REGISTRY set to its own registry, pushes the
# printed tags and points its kustomization at them (README "Kubernetes"). PYTHON_IMAGE defaults to the
# Dockerfiles' own pin (the official python image, by digest); the compose test passes a bootstrapped base.
REGISTRY ?= ghcr.io/interlink-nats
IMAGES := gateway controller submitter
CONTAINER_ENGINE ?= $(firstword $(notdir $(shell command -v docker podman 2>/dev/null)))
PYTHON_IMAGE ?= $(shell sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/docker/gateway.Dockerfile)
VERSION ?= $(eval VERSION := $(shell $(BIN)/python -m setuptools_scm 2>/dev/null))$(VERSION)
IMAGE_TAG = $(subst +,-,$(VERSION))

images: $(addprefix image-,$(IMAGES))
	@echo "built $(foreach p,$(IMAGES),$(REGISTRY)/$(p):$(IMAGE_TAG))"

$(addprefix image-,$(IMAGES)): image-%: $(RELEASE_STAMP)
	@test -n "$(CONTAINER_ENGINE)" || { echo "make images: neither docker nor podman is on PATH" >&2; exit 2; }
	@test -n "$(VERSION)" || { echo "make images: no version (setuptools-scm in $(VENV) found none)" >&2; exit 2; }
	$(CONTAINER_ENGINE) build -f deploy/docker/$*.Dockerfile --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) \
	  --build-arg VERSION=$(VERSION) -t $(REGISTRY)/$*:$(IMAGE_TAG) .

# Debian packages for the real-service tests (redis, Slurm, podman); needs root or sudo, skipped otherwise.
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: cannot install$$missing; tests that need them will be skipped"; fi; \
	fi

# Regenerate gen/ from proto/: betterproto2's classes, and the fast codecs of proto/plugins/ (buf.gen.yaml finds
# that plugin on PATH as protoc-gen-python_fastwire, linked into the venv's bin by the dev-venv rule).
# Run from an empty directory: the betterproto2 compiler formats with
# the `ruff` on PATH using the config of its working directory, and decides which __init__.py files to
# write by looking at its working directory, so running it from the repository root changes its output.
gen: dev-venv
	@work=$$(mktemp -d) && cd $$work && PATH="$(CURDIR)/$(BIN):$$PATH" \
	  "$(CURDIR)/$(BIN)/buf" generate --template "$(CURDIR)/buf.gen.yaml" -o "$(CURDIR)" "$(CURDIR)"; \
	  status=$$?; rm -rf $$work; exit $$status

lint: dev-venv
	$(BIN)/ruff check .
	$(BIN)/buf lint
	$(BIN)/buf format -d --exit-code

bench: dev-venv
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(DIST) build
