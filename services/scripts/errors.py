"""The one error the renderer raises: a pod field it cannot honour, named so the user can fix it; and a field
parsed ahead of its use that holds this error until rendering reads it (:data:`Checked`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar, Union

T = TypeVar("T")
P = ParamSpec("P")


class PodRejected(ValueError):
    """A pod (or interLink data) the renderer refuses; ``field`` is a JSON path such as
    ``spec.volumes[2].persistentVolumeClaim`` so the rejection can be shown on the pod as-is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PodMistyped(PodRejected):
    """A field whose JSON type is not Kubernetes' (a number for a string, a list for an object): the API
    server's decoding refuses it before any rule, so the gateway answers 400, not a rule's 422."""


Checked = Union[T, PodRejected]  # noqa: UP007  (a generic alias: ``T | PodRejected`` cannot be subscripted)
"""A field read only when rendering needs it: its value, or the rejection reading it raises."""


def checked(value: Checked[T]) -> T:
    """The value of a field read on demand; raises its rejection when it was not valid."""
    if isinstance(value, PodRejected):
        raise value
    return value


def on_demand(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Checked[T]:
    """``read(*args)`` for a field rendering reads only when it needs it: its value, or the rejection for later."""
    try:
        return read(*args, **kwargs)
    except PodRejected as e:
        return e
