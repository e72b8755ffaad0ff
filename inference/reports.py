"""Flatten version reports into the figures people compare: latency, throughput, agreement, size."""

from __future__ import annotations

import tempfile
from typing import Any

from django.conf import settings

from inference.models import Job, JobKind, JobStatus, ModelVersion

MIB = 2**20  # sizes everywhere in the console (tables, plot, job pages) are MiB


def public_result(value: Any) -> Any:
    """A job result without server paths: keys named "path"/"*_path"/"*_dir" go, and so do strings that
    are paths under the server's folders (data, storage, code, temporary files, system folders).

    Other strings starting with "/" stay: ONNX node names such as ``/_fc/Gemm`` in ``excluded``.
    """
    roots = _server_roots()
    if isinstance(value, dict):
        return {
            k: public_result(v)
            for k, v in value.items()
            if not (k == "path" or k.endswith(("_path", "_dir"))) and not _server_path(v, roots)
        }
    if isinstance(value, list):
        return [public_result(v) for v in value if not _server_path(v, roots)]
    return value


SYSTEM_ROOTS = ("/tmp", "/var", "/home", "/root", "/srv", "/opt", "/usr", "/etc", "/mnt", "/data", "/run")


def _server_roots() -> tuple[str, ...]:
    folders = [settings.DATA_DIR, settings.STORAGE_DIR, settings.BASE_DIR, tempfile.gettempdir()]
    return (*(str(folder).rstrip("/") for folder in folders), *SYSTEM_ROOTS)


def _server_path(value: Any, roots: tuple[str, ...]) -> bool:
    return isinstance(value, str) and any(value == root or value.startswith(root + "/") for root in roots)


def benchmark_table(result: dict | None) -> dict | None:
    """A benchmark result as rounded figures with units, one row per batch size; None when not one."""
    batches = _batches(result)
    if not batches:
        return None
    rows = []
    for size, b in sorted(batches.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        rows.append(
            {
                "batch": size,
                "p50_ms": _round(b.get("p50_ms"), 2),
                "p90_ms": _round(b.get("p90_ms"), 2),
                "throughput_per_s": _round(b.get("throughput_per_s"), 1),
                "runs": b.get("runs"),
            }
        )
    size = (result or {}).get("size_bytes")
    return {
        "rows": rows,
        "size_mib": _round(size / MIB, 1) if isinstance(size, (int, float)) else None,
        "threads": (result or {}).get("threads"),
        "sequence_length": (result or {}).get("sequence_length"),
    }


def _round(value: Any, digits: int) -> float | None:
    return round(float(value), digits) if isinstance(value, (int, float)) else None


def _batches(latency: dict | None) -> dict:
    return (latency or {}).get("batches", {})


def _agreement(report: dict) -> dict:
    agreement = report.get("agreement") or {}
    if "confident_top1_agreement" in agreement:
        return {
            "metric": "top-1 agreement (confident)",
            "value": agreement.get("confident_top1_agreement"),
            "top1": agreement.get("top1_agreement"),
            "top5": agreement.get("parent_top1_in_child_top5"),
        }
    if "mean_cosine" in agreement:
        return {
            "metric": "mean cosine similarity",
            "value": agreement["mean_cosine"],
            "min": agreement.get("min_cosine"),
        }
    if "next_token_agreement" in agreement:
        return {
            "metric": "next-token agreement",
            "value": agreement["next_token_agreement"],
            "perplexity_change": agreement.get("perplexity_change"),
        }
    return {}


def version_rows(versions: list[ModelVersion]) -> list[dict]:
    """One row per version; latency comes from its own report, a child's report or a benchmark job."""
    by_parent: dict[int, dict] = {}
    for v in versions:
        if v.parent_id and (v.report or {}).get("latency"):
            by_parent.setdefault(v.parent_id, v.report["latency"].get("parent"))
    benchmarks = {
        j.source_id: j.result
        for j in Job.objects.filter(
            source__in=versions, kind=JobKind.BENCHMARK, status=JobStatus.SUCCEEDED
        ).order_by("finished_at")
    }
    # The job that made each version, and how many examples its report lists as disagreeing with the
    # parent (a download on the job's page; none listed: no link).
    makers = {
        j.output_id: (j.pk, ((j.result or {}).get("disagreements") or {}).get("count"))
        for j in Job.objects.filter(output__in=versions, status=JobStatus.SUCCEEDED).only(
            "pk", "output_id", "result"
        )
    }
    rows = []
    for v in versions:
        own = ((v.report or {}).get("latency") or {}).get("child")
        # A benchmark job measured this version on its own, after the conversion did: its figures win.
        batches = _batches(benchmarks.get(v.pk) or own or by_parent.get(v.pk))
        agreement = _agreement(v.report or {}) if v.parent_id else {"metric": "reference", "value": 1.0}
        rows.append(
            {
                "id": v.pk,
                "label": str(v),
                "number": v.number,
                "precision": v.precision,
                "size_bytes": v.size_bytes,
                "parent": str(v.parent) if v.parent_id else "",
                "created_at": v.created_at,
                "p50_b1": batches.get("1", {}).get("p50_ms"),
                "p50_b8": batches.get("8", {}).get("p50_ms"),
                "throughput_b8": batches.get("8", {}).get("throughput_per_s"),
                "speedup_b8": ((v.report or {}).get("latency") or {}).get("speedup", {}).get("8"),
                "agreement": agreement,
                "options": (v.lineage or {}).get("options", {}),
                "kind": (v.lineage or {}).get("kind", v.lineage.get("source", "")),
                "tuning": (v.report or {}).get("tuning"),
                "job_id": makers.get(v.pk, (None, None))[0],
                "disagreements": makers.get(v.pk, (None, None))[1],
            }
        )
    return rows


def chart_points(rows: list[dict]) -> list[dict]:
    """Points for the trade-off plot: latency at batch 8 against agreement, sized by file size.

    A version made by a tuning job adds one point per tried configuration (``trial``; the kept one has
    ``chosen``), timed against the same parent in the same run.
    """
    points = [
        {
            "label": r["label"],
            "latency": r["p50_b8"],
            "agreement": r["agreement"].get("value"),
            "size_mib": r["size_bytes"] / MIB,
            "precision": r["precision"],
        }
        for r in rows
        if r["p50_b8"] is not None and r["agreement"].get("value") is not None
    ]
    return points + [point for r in rows for point in _trial_points(r)]


def _trial_points(row: dict) -> list[dict]:
    tuning = row.get("tuning") or {}
    points = []
    for trial in tuning.get("trials") or []:
        value = _agreement({"agreement": trial.get("agreement")}).get("value")
        if value is None or not isinstance(trial.get("latency_ms"), (int, float)):
            continue
        points.append(
            {
                "label": f"{row['label']} trial {trial.get('trial')}",
                "latency": trial["latency_ms"],
                "agreement": value,
                "size_mib": (trial.get("size_bytes") or row["size_bytes"]) / MIB,
                "precision": row["precision"],
                "trial": trial.get("trial"),
                "chosen": trial.get("trial") == tuning.get("chosen"),
                "met": bool(trial.get("met")),
            }
        )
    return points
