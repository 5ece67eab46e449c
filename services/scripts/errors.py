"""The one error the renderer raises: a pod field it cannot honour, named so the user can fix it."""

from __future__ import annotations


class PodRejected(ValueError):
    """A pod (or interLink data) the renderer refuses; ``field`` is a JSON path such as
    ``spec.volumes[2].persistentVolumeClaim`` so the rejection can be shown on the pod as-is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
