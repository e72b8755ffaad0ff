"""Numbers typed into HTML forms: a blank field takes its default, a malformed one is refused.

Every console form reads its numbers here, so "abc" in a number field is an error message and no
change, never a silent default. The management API gets the same guarantee from its schemas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from core.errors import ValidationFailed

N = TypeVar("N", int, float)
_KINDS = {int: "a whole number", float: "a number"}


def optional_number(data: Mapping[str, Any], field: str, kind: type[N]) -> N | None:
    """``data[field]`` as ``kind``; None when absent or blank; ValidationFailed naming the field if malformed."""
    raw = data.get(field)
    if raw is None or not str(raw).strip():
        return None
    malformed = ValidationFailed(f"{field} must be {_KINDS[kind]}, got {raw!r}")
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise malformed from None
    if not math.isfinite(value):  # "nan" and "inf" parse as floats but are no setting anyone means
        raise malformed
    return value


def form_int(data: Mapping[str, Any], field: str, *, default: int | None = None) -> int:
    """A whole number from ``data[field]``; blank takes ``default``, or is refused when there is none."""
    value = optional_number(data, field, int)
    if value is not None:
        return value
    if default is None:
        raise ValidationFailed(f"{field} is required")
    return default
