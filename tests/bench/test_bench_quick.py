"""``python -m bench --quick`` runs every target end to end and prints one well-formed JSON line per
scenario. Only the shape is checked: timings depend on the machine and never decide a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"target", "model", "concurrency", "requests", "p50_ms", "p95_ms", "p99_ms", "throughput_rps",
          "errors", "mean_batch_size"}  # fmt: skip


@pytest.fixture(scope="module")
def quick_lines(tmp_path_factory) -> list[dict]:
    work = tmp_path_factory.mktemp("bench")
    result = subprocess.run(
        # Every target but scale-from-zero, whose code (bench.coldstart.run_coldstart) runs on the shared
        # stack in tests/rollouts/test_rollouts_e2e.py instead of starting one more console here.
        [sys.executable, "-m", "bench", "--quick", "--work-dir", str(work),
         "--scenarios", "raw,runner,plain,gateway,edge,fleet,rollout"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_quick_bench_prints_a_complete_line_for_every_target_model_and_concurrency(quick_lines) -> None:
    seen = {(line["target"], line["model"], line["concurrency"]) for line in quick_lines}
    for target in ("raw", "runner", "plain", "gateway", "stack-runner", "edge"):
        for model in ("fp32", "int8"):
            for concurrency in (1, 8, 32):
                assert (target, model, concurrency) in seen, (target, model, concurrency)
    for line in quick_lines:
        assert FIELDS <= set(line), line


def test_quick_bench_lines_hold_numbers_and_no_failed_requests(quick_lines) -> None:
    for line in quick_lines:
        assert "skipped" not in line, line["skipped"]
        if line["target"] in ("fleet", "rollout"):
            continue  # heartbeats have no batches, replicas come and go in a rollout: checked below
        assert line["errors"] == 0, line
        assert line["requests"] > 0 and line["throughput_rps"] > 0
        assert 0 < line["p50_ms"] <= line["p95_ms"] <= line["p99_ms"]
        assert line["mean_batch_size"] >= 1


def test_quick_fleet_line_holds_heartbeats_pages_and_postgres_writes(quick_lines) -> None:
    """Simulated agents joined with join tokens, got replicas placed and heartbeat with their
    credentials; the API and pages answered; liveness did not write the node table per heartbeat."""
    (fleet,) = [line for line in quick_lines if line["target"] == "fleet"]
    assert "skipped" not in fleet, fleet["skipped"]
    assert fleet["errors"] == fleet["api_errors"] == fleet["page_errors"] == 0, fleet.get("error_samples")
    assert fleet["requests"] >= fleet["concurrency"] and fleet["throughput_rps"] > 0
    assert 0 < fleet["p50_ms"] <= fleet["p95_ms"] <= fleet["p99_ms"]
    assert fleet["replicas"] == fleet["concurrency"] * 2  # the quick fleet: two replicas per node
    assert fleet["api_requests"] > 0 and fleet["page_requests"] > 0
    assert fleet["api_p95_ms"] > 0 and fleet["page_p95_ms"] > 0
    for kind in ("api", "page"):  # which path holds a figure up: every path polled, each with its p95
        by_path = fleet[f"{kind}_p95_ms_by_path"]
        assert len(by_path) >= 2 and all(p.startswith("/") and ms > 0 for p, ms in by_path.items()), by_path
    assert fleet["node_row_writes"] < fleet["requests"] and fleet["writes_avoided"] > 0


def test_quick_rollout_line_holds_the_change_against_the_load_before_it(quick_lines) -> None:
    """Two replicas rolled to a new version under a steady load through a node agent's edge: the rollout
    replaced every replica, and no request failed before, during or after it."""
    (rollout,) = [line for line in quick_lines if line["target"] == "rollout"]
    assert "skipped" not in rollout, rollout["skipped"]
    assert FIELDS <= set(rollout), rollout
    # Every replica of the new version and ready (the quick run stops there: the rollout's own record
    # says done on a later pass of the reconciler); never rolled back.
    assert rollout["replaced_s"] > 0 and rollout["rollout_state"] in ("in_progress", "done"), rollout
    assert (
        rollout["errors"]
        == rollout["before_errors"]
        == rollout["after_errors"]
        == rollout["failed_total"]
        == 0
    )
    assert rollout["requests"] > 0 and rollout["before_requests"] > 0 and rollout["throughput_rps"] > 0
    for prefix in ("", "before_"):
        assert 0 < rollout[f"{prefix}p50_ms"] <= rollout[f"{prefix}p95_ms"] <= rollout[f"{prefix}p99_ms"]
    assert rollout["replicas"] == 2 and rollout["via"] == "edge"
    assert sum(rollout["served_by_version"].values()) == rollout["requests"]
