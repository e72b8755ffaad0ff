"""The audit log as files: CSV and JSON Lines, streamed row by row (an export can be long)."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable, Iterator

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from accounts.models import AuditEvent

COLUMNS = ["id", "created_at", "actor", "action", "target", "before", "after", "data", "address"]
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


def event_row(event: AuditEvent) -> dict:
    return {
        "id": event.pk,
        "created_at": event.created_at.isoformat(),
        "actor": event.actor.username if event.actor else None,
        "action": event.action,
        "target": event.target,
        "before": event.before,
        "after": event.after,
        "data": event.data,
        "address": event.address,
    }


class _Line:
    """A file-like object whose write() hands the line back, so csv.writer can feed a stream."""

    def write(self, value: str) -> str:
        return value


def _csv_cell(value: object) -> str:
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value or "")
    # A cell starting with = + - @ runs as a formula in spreadsheets (CSV injection): quote it out.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_lines(events: Iterable[AuditEvent]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(COLUMNS)
    for event in events:
        row = event_row(event)
        yield writer.writerow([_csv_cell(row[c]) for c in COLUMNS])


def jsonl_lines(events: Iterable[AuditEvent]) -> Iterator[str]:
    for event in events:
        yield json.dumps(event_row(event), sort_keys=True) + "\n"


def export_response(events: QuerySet[AuditEvent], fmt: str, *, team_name: str) -> StreamingHttpResponse:
    """A download of `events` as `fmt` (csv or jsonl)."""
    pending = events.iterator(chunk_size=500)
    # The query runs here, before the response starts: a database error becomes the API's clean answer
    # (503/422 through the one error handler) instead of a stream cut after its headers went out.
    first = list(itertools.islice(pending, 1))
    rows = itertools.chain(first, pending)
    lines = csv_lines(rows) if fmt == "csv" else jsonl_lines(rows)
    response = StreamingHttpResponse(lines, content_type=FORMATS[fmt])
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in team_name)[:60] or "team"
    response["Content-Disposition"] = f'attachment; filename="audit-{safe}.{fmt}"'
    return response
