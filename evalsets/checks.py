"""Checking an uploaded text or prompt set (JSON Lines); every refusal is a precise 422.

Image sets are checked in the sandbox child (``inference.validation.image_sets``, started by
``services.dataset_create``): decoding thousands of images is not the console's to do. ``DatasetLimits``
and ``Checked`` live there and are shared. The normalised forms (what ``services.dataset_materialize``
lays out for jobs): a zip of ``<label>/<file>`` (flat when unlabelled), or JSON Lines of
``{"text", "label"?}`` / ``{"prompt"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import ValidationFailed
from inference.validation.image_sets import Checked, DatasetLimits

__all__ = ["Checked", "DatasetLimits", "check_json_lines"]
TEXT_SAMPLES = 3
MAX_TEXT_CHARS = 100_000
MAX_TEXT_FILE_BYTES = 64 * 1024**2  # a text set is read whole in the request


def refuse(message: str) -> ValidationFailed:
    return ValidationFailed(message)


# ---- text and prompt sets ----------------------------------------------------------------------------
def check_json_lines(upload: Path, kind: str, out: Path, limits: DatasetLimits) -> Checked:
    """Check a JSON Lines text set (``text``, optional ``label``) or prompt set (``prompt``); write ``out``."""
    if upload.stat().st_size > MAX_TEXT_FILE_BYTES:
        raise refuse(f"a {kind[:-1]} set is at most {MAX_TEXT_FILE_BYTES // 1024**2} MiB of JSON Lines")
    with upload.open("rb") as handle:
        head = handle.read(4)
    if head.startswith(b"PK"):
        raise refuse(f"a {kind[:-1]} set is a JSON Lines file, not a zip")
    try:
        text = upload.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise refuse("the file is not UTF-8 text") from None
    rows = [_row(line, number, kind) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        raise refuse("the file holds no lines: send one JSON object per line")
    if len(rows) > limits.max_items:
        raise refuse(f"the set has {len(rows)} lines; the limit is {limits.max_items}")
    with_label = [row for row in rows if "label" in row]
    if with_label and len(with_label) != len(rows):
        missing = next(i for i, row in enumerate(rows, 1) if "label" not in row)
        raise refuse(f"entry {missing} has no label but others do: label every line or none")
    counts: dict[str, int] = {}
    for row in with_label:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    with out.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    key = "prompt" if kind == "prompts" else "text"
    samples = [{"label": row.get("label", ""), "text": row[key][:200]} for row in rows[:TEXT_SAMPLES]]
    return Checked(out, len(rows), bool(with_label), counts, samples)


def _row(line: str, number: int, kind: str) -> dict[str, str]:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError):  # nesting deep enough to exhaust the parser too
        raise refuse(f"line {number} is not JSON") from None
    if not isinstance(value, dict):
        raise refuse(f"line {number} is not a JSON object")
    key = "prompt" if kind == "prompts" else "text"
    item = value.get(key)
    if not isinstance(item, str) or not item.strip():
        raise refuse(f'line {number}: a {kind[:-1]} set needs a non-empty "{key}" string on every line')
    if "\x00" in item:
        raise refuse(f'line {number}: "{key}" holds a NUL character')
    if len(item) > MAX_TEXT_CHARS:
        raise refuse(f'line {number}: "{key}" is longer than {MAX_TEXT_CHARS} characters')
    row = {key: item}
    if kind == "texts" and value.get("label") is not None:
        label = value["label"]
        text = str(label).strip()
        if isinstance(label, bool) or not isinstance(label, str | int) or not text or not text.isprintable():
            raise refuse(f'line {number}: "label" must be a non-empty printable string or an integer')
        row["label"] = text
    return row
