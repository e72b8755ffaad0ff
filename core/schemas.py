"""The base of every request body the management API reads: unknown fields are refused (422).

A misspelt field (``replica`` for ``replicas``) silently ignored would leave the caller believing a
change was made; refusing it names the field instead. Response schemas stay open (plain ``Schema``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.http import HttpRequest
from ninja import Schema
from pydantic import ConfigDict

from core.errors import ValidationFailed


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid")


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line for a 422 from pydantic's errors: an unknown field first (it is the likeliest mistake,
    and a misspelt field also shows up as a missing one), else the first error, with where it is."""
    if not errors:
        return "invalid input"
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    first = unknown[0] if unknown else errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "payload"))
    if unknown:
        return f"unknown field '{where}': this request does not take it"
    message = str(first.get("msg", "invalid input"))
    return f"{where}: {message}" if where else message


def strict_form(view: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a multipart view (beneath the router's decorator): any form field or file that is not
    one of its parameters is refused with a 422 before it runs."""
    signature = inspect.signature(view, eval_str=True)  # ninja reads it, in this module's globals
    fields = tuple(name for name in signature.parameters if name != "request")

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        form_fields_require(request, fields)
        return view(request, *args, **kwargs)

    checked.__signature__ = signature  # type: ignore[attr-defined]
    return checked


def form_fields_require(request: HttpRequest, allowed: Iterable[str]) -> None:
    """Refuse (422) a multipart form carrying a field or file the view does not read."""
    known = set(allowed)
    sent = set(request.POST) | set(request.FILES)
    unknown = sorted(sent - known)
    if unknown:
        raise ValidationFailed(f"unknown field '{unknown[0]}': this request takes {', '.join(sorted(known))}")
