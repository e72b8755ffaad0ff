"""The registry of job kinds: one class per kind, found by looking in ``inference.jobs.kinds``.

A kind states its ``name`` (the value stored in ``Job.kind``; never rename one), a ``label`` for people,
whether it needs an ONNX source, a typed ``Options`` schema and ``run(job, reporter, workdir)``. From the
registry come the allowed kinds, the per-kind options check at start, the choices of ``Job.kind`` and
the options documented in the OpenAPI document. Adding a kind is adding one module to ``kinds/``.

This module imports no Django model (``inference.models`` imports it for the field choices).
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from core.errors import ValidationFailed

if TYPE_CHECKING:
    from inference.jobs.reporter import JobReporter
    from inference.models import Job, ModelVersion

KINDS_PACKAGE = "inference.jobs.kinds"


class KindOptions(BaseModel):
    """Base of every kind's options: typed, documented, and unknown keys refused."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def parse(cls, options: Any, *, kind: str) -> Self:
        """``options`` as this schema; ValidationFailed names the first bad option (``options.<name>: why``)."""
        if not isinstance(options, dict):
            raise ValidationFailed("options must be a JSON object")
        try:
            return cls.model_validate(options)
        except PydanticValidationError as exc:
            raise ValidationFailed(_option_error(kind, cls, exc)) from None


@dataclass
class Outcome:
    """What a finished run yields: the job's result (JSON) and the version it produced, if any."""

    result: dict
    output: ModelVersion | None = None


class JobKindBase:
    """One kind of job. Subclasses set the class attributes and write ``run``."""

    name: ClassVar[str]
    label: ClassVar[str]
    needs_onnx: ClassVar[bool] = True  # refuse a source in another format (export says so the other way)
    startable: ClassVar[bool] = True  # False: another service starts it (an import starts from an upload)
    Options: ClassVar[type[KindOptions]] = KindOptions

    @classmethod
    def check_source(cls, source: ModelVersion) -> None:
        """Refuse a source this kind cannot work on, with a reason a person can act on."""
        if cls.needs_onnx and source.format != "onnx":
            raise ValidationFailed(
                f"{cls.name} needs an ONNX version; export this {source.format} version first"
            )

    @classmethod
    def parse_options(cls, options: Any) -> KindOptions:
        """The options as this kind's schema; ValidationFailed names the first bad option."""
        return cls.Options.parse(options, kind=cls.name)

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Do the work in ``workdir`` (removed afterwards), reporting through ``reporter``."""
        raise NotImplementedError


def _option_error(kind: str, schema: type[KindOptions], exc: PydanticValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        why = f"unknown option for {kind}; known options: {', '.join(schema.model_fields) or 'none'}"
    else:
        why = first["msg"]
    return f"options.{where}: {why}" if where else f"options: {why}"


_KINDS: dict[str, type[JobKindBase]] = {}
_discovery = threading.Lock()
_discovered = False


def register(kind: type[JobKindBase]) -> type[JobKindBase]:
    """Class decorator: add a kind to the registry (each name once)."""
    known = _KINDS.get(kind.name)
    if known is not None and (known.__module__, known.__qualname__) != (kind.__module__, kind.__qualname__):
        raise RuntimeError(
            f"job kind {kind.name!r} is registered by both {known.__module__} and {kind.__module__}"
        )
    _KINDS[kind.name] = kind
    return kind


def _discover() -> None:
    """Import every module of ``inference.jobs.kinds`` once; their ``@register`` fills the registry."""
    global _discovered
    with _discovery:
        if _discovered:
            return
        package = importlib.import_module(KINDS_PACKAGE)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{KINDS_PACKAGE}.{module.name}")
        _discovered = True


def kinds(*, startable: bool = False) -> dict[str, type[JobKindBase]]:
    """Every registered kind by name (only those POST /api/v1/jobs may start, with ``startable``)."""
    _discover()
    return {name: kind for name, kind in _KINDS.items() if kind.startable or not startable}


def kind_get(name: str) -> type[JobKindBase]:
    """The kind called ``name``; ValidationFailed lists the kinds there are."""
    found = kinds().get(name)
    if found is None:
        raise ValidationFailed(f"unknown job kind {name!r}; choose one of {', '.join(kinds(startable=True))}")
    return found


def kind_choices(*, startable: bool = False) -> list[tuple[str, str]]:
    """(name, label) pairs: the console's "new job" form (and migration 0003, which once made them the
    choices of ``Job.kind``; the model no longer imports the registry)."""
    return [(name, kind.label) for name, kind in kinds(startable=startable).items()]


def kind_label(name: str) -> str:
    """The label people read for a stored kind; the name itself for one no longer registered."""
    found = kinds().get(name)
    return found.label if found is not None else name


class KindNameSchema:
    """``Annotated[str, KindNameSchema()]``: the OpenAPI document lists the startable kinds."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        schema = handler(core_schema)
        schema["enum"] = list(kinds(startable=True))
        return schema


class KindOptionsSchema:
    """``Annotated[dict, KindOptionsSchema()]``: the OpenAPI document shows each kind's options.

    The request keeps a plain object (checked against the kind's schema by the service, which names the
    bad option); the document lists each kind's schema and maps kind names to their titles.
    """

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        startable = kinds(startable=True)
        return {
            "type": "object",
            "title": "Options",
            "anyOf": [handler(kind.Options.__pydantic_core_schema__) for kind in startable.values()],
            "x-options-by-kind": {name: kind.Options.__name__ for name, kind in startable.items()},
            "description": "The options of the chosen kind: x-options-by-kind names the schema (in anyOf) "
            "of each kind; unknown keys and out-of-range values are refused.",
        }
