"""Fuzzing the gateway's HTTP API from its own OpenAPI file: no input ever gets a 5xx.

schemathesis generates positive and negative data for every operation (``GET /status`` and
``GET /getLogs`` really carry their JSON bodies), against the served schema and a strict copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from gateway_fuzz import FIELD_MESSAGE, FUZZ, SCALE, Live, assert_not_5xx_and_explained, defang
from gateway_fuzz import live as live
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "services" / "gateway" / "openapi.json"
SCHEMA = schemathesis.openapi.from_path(str(SCHEMA_FILE))


def _strict(raw: dict[str, Any]) -> dict[str, Any]:
    """The same API with the pod fields the gateway needs made required, so schemathesis gets past the
    identity checks and reaches the renderer, the submitter and back (its negative mode then mutates
    near-valid pods)."""
    schemas = raw["components"]["schemas"]
    word = {"type": "string", "minLength": 1, "maxLength": 12}
    schemas["ObjectMeta"]["required"] = ["name", "namespace", "uid"]
    for key in ("name", "namespace"):
        schemas["ObjectMeta"]["properties"][key] = word
    schemas["ObjectMeta"]["properties"]["uid"] = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,11}$"}
    one_element = raw["paths"]["/create"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"][1]
    one_element.update(minItems=1, maxItems=1)
    container = {
        "type": "object",
        "required": ["name", "command"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z]([a-z0-9-]{0,6}[a-z0-9])?$"},
            "image": {"type": "string"},
            "command": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "args": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "workingDir": {"type": "string"},
            "env": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                },
            },
        },
    }
    schemas["Pod"]["required"] = ["metadata", "spec"]
    schemas["Pod"]["properties"]["spec"] = {
        "type": "object",
        "required": ["containers"],
        "properties": {
            "containers": {"type": "array", "minItems": 1, "maxItems": 3, "items": container},
            "initContainers": {"type": "array", "maxItems": 2, "items": container},
        },
    }
    return raw


STRICT_SCHEMA = schemathesis.openapi.from_dict(_strict(json.loads(SCHEMA_FILE.read_text())))


# --- schemathesis ------------------------------------------------------------------------------

OPERATIONS = [("/create", "POST"), ("/status", "GET"), ("/delete", "POST"), ("/getLogs", "GET")]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# Negative /create bodies are slow to generate (~0.25 s each): fewer of them.
EXAMPLES = {("/create", GenerationMode.NEGATIVE): 12 * SCALE}


@pytest.mark.parametrize("strict", [False, True], ids=["served-schema", "strict-schema"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[p for p, _ in OPERATIONS])
def test_schemathesis_cases_never_get_a_5xx(
    live: Live, path: str, method: str, mode: GenerationMode, strict: bool
) -> None:
    schema = STRICT_SCHEMA if strict else SCHEMA

    @settings(FUZZ, max_examples=EXAMPLES.get((path, mode), 25 * SCALE))
    @given(case=schema[path][method].as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        if path == "/create" and case.body is not NOT_SET:
            defang(case.body, live.sandbox)
        response = case.call(base_url=live.base_url, timeout=30)
        sent = response.request.body
        if mode is GenerationMode.POSITIVE:
            assert sent, f"{method} {path} was sent without its JSON body"  # GET bodies must really travel
        assert_not_5xx_and_explained(response, f"{method} {path} {sent!r:.300}")
        case.validate_response(response, checks=CHECKS)
        if path == "/create" and response.status_code == 200:  # it runs: cancel it
            live.send("POST", "/delete", case.body if isinstance(case.body, dict) else case.body[0])
        if path == "/create" and 400 <= response.status_code < 500 and response.status_code != 413:
            assert FIELD_MESSAGE.match(response.text), f"create 4xx names no field: {response.text[:300]}"

    check()
    live.assert_alive()


@settings(FUZZ, max_examples=10)
@given(data=st.data())
def test_schemathesis_health_and_metrics(live: Live, data: st.DataObject) -> None:
    for path in ("/healthz", "/metrics"):
        case = data.draw(SCHEMA[path]["GET"].as_strategy(), label=path)
        response = case.call(base_url=live.base_url, timeout=30)
        assert response.status_code == 200, response.text
        case.validate_response(response, checks=CHECKS)


def test_the_served_openapi_is_the_one_fuzzed(live: Live) -> None:
    served = live.http.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == json.loads(SCHEMA_FILE.read_text())
