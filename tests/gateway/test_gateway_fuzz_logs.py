"""Fuzzing ``GET /getLogs`` options on a real finished pod: never a 5xx, only its output."""

from __future__ import annotations

import collections
import json
import re
from typing import Any

from gateway_fuzz import FIELD_MESSAGE, FUZZ, LOG_EXAMPLES, Live, assert_not_5xx_and_explained, junk, mostly, text
from gateway_fuzz import finished_pod as finished_pod
from gateway_fuzz import live as live
from hypothesis import given, settings
from hypothesis import strategies as st
from stack import logs_body

# --- getLogs options on a real pod -------------------------------------------------------------

log_int = mostly(
    st.integers(0, 1000),
    st.integers(-3, -1),
    st.integers(2**62, 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    junk,
    odds=8,
)
log_bool = mostly(st.booleans(), st.none(), st.integers(0, 1), junk)
since_time = mostly(
    st.sampled_from(["0001-01-01T00:00:00Z", "", "2024-01-01T00:00:00Z", "2999-01-01T00:00:00+02:00"]),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-14:00",
            "0001-01-01T00:00:00+14:00",
            "0002-01-01T00:00:00+14:00",
            "not a time",
            "2024-02-30T00:00:00Z",
            "2024-01-01",
            "2024-01-01T00:00:00",
        ]
    ),
    st.datetimes().map(str),
    junk,
)
log_opts = st.fixed_dictionaries(
    {},
    optional={
        "Tail": log_int,
        "Bytes": log_int,
        "SinceSeconds": log_int,
        "SinceTime": since_time,
        "Timestamps": log_bool,
        "Follow": log_bool,
        "Previous": log_bool,
    },
)


HELLO_PREFIX_WITH_TIMESTAMP = re.compile(r"[0-9TZ:.+\-]*( (h(e(l(l(o(\n)?)?)?)?)?)?)?")


def is_output_of_hello(text: str) -> bool:
    """What ``echo hello``'s log may look like under any getLogs options: all of it (with or without a
    timestamp), nothing, or the first N bytes of either (Kubernetes' limit-bytes counts from the start)."""
    return "hello\n".startswith(text) or "hello\n" in text or HELLO_PREFIX_WITH_TIMESTAMP.fullmatch(text) is not None


def test_getlogs_options_on_a_real_pod_never_get_a_5xx(live: Live, finished_pod: dict[str, Any]) -> None:
    answers: collections.Counter[int] = collections.Counter()

    @settings(FUZZ, max_examples=LOG_EXAMPLES)
    @given(opts=mostly(log_opts, junk), container=mostly(st.just("main"), text))
    def check(opts: Any, container: str) -> None:
        body = logs_body(finished_pod, container)
        body["Opts"] = opts
        response = live.send("GET", "/getLogs", body)
        answers[response.status_code] += 1
        assert_not_5xx_and_explained(response, f"getLogs {json.dumps(body)[:400]}")
        if response.status_code == 200:  # all of it, its tail, its first N bytes (--limit-bytes), or nothing
            assert is_output_of_hello(response.text), response.text
        else:
            assert response.status_code in (400, 404), response.text
            assert FIELD_MESSAGE.match(response.text) or response.status_code == 404, response.text
        live.assert_alive()

    check()
    assert answers[200] >= LOG_EXAMPLES // 10, answers
