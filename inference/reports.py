"""Flatten version reports into the figures people compare: latency, throughput, agreement, size."""

from __future__ import annotations

from inference.models import Job, JobKind, JobStatus, ModelVersion


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
    rows = []
    for v in versions:
        own = ((v.report or {}).get("latency") or {}).get("child")
        batches = _batches(own or by_parent.get(v.pk) or benchmarks.get(v.pk))
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
            }
        )
    return rows


def chart_points(rows: list[dict]) -> list[dict]:
    """Points for the trade-off plot: latency at batch 8 against agreement, sized by file size."""
    return [
        {
            "label": r["label"],
            "latency": r["p50_b8"],
            "agreement": r["agreement"].get("value"),
            "size_mb": r["size_bytes"] / 1e6,
            "precision": r["precision"],
        }
        for r in rows
        if r["p50_b8"] is not None and r["agreement"].get("value") is not None
    ]
