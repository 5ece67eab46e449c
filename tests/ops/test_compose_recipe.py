"""The compose images' recipe, without building anything: apt sources, the base's cache key, image names."""

from __future__ import annotations

import yaml
from compose_images import COMPOSE_FILE, apt_mirror, base_cache_key, compose_builds, fully_qualified


def test_apt_mirror_reads_deb822_and_one_line_sources() -> None:
    deb822 = (
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\n"
    )
    assert apt_mirror(deb822) == "http://mirror.example/debian"
    assert apt_mirror("deb [arch=amd64] http://old.example/debian bookworm main\n") == "http://old.example/debian"
    assert apt_mirror("Types: deb\nURIs: http://x.example/debian\nSuites: trixie\n") is None


def test_base_cache_key_changes_with_every_input() -> None:
    key = base_cache_key("http://a/debian", b"ca")
    assert key == base_cache_key("http://a/debian", b"ca")
    assert key != base_cache_key("http://b/debian", b"ca")
    assert key != base_cache_key("http://a/debian", b"other ca")


def test_fully_qualified_image_names() -> None:
    assert fully_qualified("redis:7.4-bookworm") == "docker.io/library/redis:7.4-bookworm"
    assert fully_qualified("bitnami/redis:7") == "docker.io/bitnami/redis:7"
    assert fully_qualified("ghcr.io/x/y:1") == "ghcr.io/x/y:1"
    assert fully_qualified("localhost/base:1") == "localhost/base:1"


def test_compose_builds_every_project_image_from_deploy_docker() -> None:
    builds = compose_builds(yaml.safe_load(COMPOSE_FILE.read_text()))
    assert {path.name for path in builds.values()} == {"gateway.Dockerfile", "submitter.Dockerfile"}
