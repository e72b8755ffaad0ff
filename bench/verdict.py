"""How the measured figures compare with the goals of the batching issue (printed to stderr only)."""

from __future__ import annotations

import sys


def _find(results: list[dict], target: str, model: str, concurrency: int) -> dict | None:
    for line in results:
        ok = line["target"] == target and line["model"] == model and line["concurrency"] == concurrency
        if ok and line.get("throughput_rps"):
            return line
    return None


def _checks(results: list[dict], model: str) -> list[tuple[str, float | None, str]]:
    raw32, run32 = _find(results, "raw", model, 32), _find(results, "runner", model, 32)
    plain32 = _find(results, "plain", model, 32)
    raw1, run1 = _find(results, "raw", model, 1), _find(results, "runner", model, 1)
    gate1 = _find(results, "gateway", model, 1)
    checks: list[tuple[str, float | None, str]] = []
    if raw32 and run32:
        checks.append(
            ("runner/raw throughput @32", run32["throughput_rps"] / raw32["throughput_rps"], ">= 0.90")
        )
    if plain32 and run32:
        checks.append(
            ("runner/plain throughput @32", run32["throughput_rps"] / plain32["throughput_rps"], ">= 1.25")
        )
    if raw1 and run1:
        checks.append(("runner p50 - raw p50 @1 (ms)", run1["p50_ms"] - raw1["p50_ms"], "<= 2"))
    if gate1:
        checks.append(("gateway added p50 @1 (ms)", gate1.get("added_p50_ms"), "<= 2"))
    if run32:
        checks.append(("runner mean batch @32", run32["mean_batch_size"], "> 4"))
        checks.append(
            ("runner p99/p50 @32", run32["p99_ms"] / run32["p50_ms"] if run32["p50_ms"] else None, "<= 1.5")
        )
    return checks


def print_verdict(results: list[dict]) -> None:
    models = sorted({line["model"] for line in results})
    for model in models:
        for name, value, goal in _checks(results, model):
            shown = "n/a" if value is None else f"{value:.3f}"
            print(f"bench: [{model}] {name}: {shown} (goal {goal})", file=sys.stderr)
