"""Pod -> bash job script: one code path, jinja2 templates, every pod string shell-quoted.

Pure: rendering does no I/O. The job directory contract the script follows is in :mod:`interlink_nats.kernel.layout`.
"""

from __future__ import annotations

from .environment import expand
from .errors import PodRejected
from .pod_group import PodGroupSpec
from .pod_parse import pod_resources
from .pod_resources import parse_quantity
from .render import RenderedPod, render_job, render_pod

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

__all__ = [
    "PodGroupSpec",
    "PodRejected",
    "RenderedPod",
    "expand",
    "parse_quantity",
    "pod_resources",
    "render_job",
    "render_pod",
]
