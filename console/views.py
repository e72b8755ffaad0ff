"""Dashboard and the console's own health endpoints."""

from __future__ import annotations

import json
from pathlib import Path

import plotly
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import FileResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts import keycache
from accounts.current import membership_for_request
from contract.redis_keys import RedisKeys
from inference import selectors
from inference.live import node_stats_payload, region_traffic


@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request):
    """Ready when PostgreSQL and Redis both answer; 503 naming what is down otherwise."""
    problems = []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        problems.append("database")
    try:
        keycache.client().ping()
    except Exception:
        problems.append("redis")
    if problems:
        return JsonResponse({"status": "unavailable", "failing": problems}, status=503)
    return JsonResponse({"status": "ready", "sandbox": _sandbox_workers()})


def _sandbox_workers() -> dict:
    """Each worker's sandbox state as it reported it at start: isolated, and whether model jobs run
    (a worker that cannot isolate refuses them unless the operator accepted the risk). Not a readiness
    condition of the console itself."""
    try:
        raw = keycache.client().hgetall(RedisKeys(settings.REDIS_PREFIX).sandbox_workers())
    except Exception:
        return {}
    states = {}
    for host, value in raw.items():
        try:
            state = json.loads(value)
        except ValueError:
            continue
        if isinstance(state, dict):
            name = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
            states[name] = {k: state.get(k) for k in ("isolated", "model_jobs", "reason")}
    return states


@login_required
def dashboard(request):
    """The fleet at a glance for the team: traffic per region, nodes, what needs attention, recent jobs.

    The page is rendered current and then kept live by `/ws/overview/` (inference.consumers).
    """
    membership = membership_for_request(request)
    # The shared fleet and the team's own nodes; without a team, the shared fleet only.
    if membership:
        nodes = list(selectors.nodes_with_load(team=membership.team))
    else:
        nodes = list(selectors.nodes_with_load().filter(team__isnull=True))  # the shared fleet
    context: dict = {"deployments": [], "models": [], "nodes": _node_rows(nodes), "attention": [], "jobs": [],
                     "regions": []}  # fmt: skip
    if membership:
        team = membership.team
        deployments = selectors.deployments_with_state_counts(team=team)
        context |= {
            "deployments": deployments,
            "models": list(selectors.models_for_team(team=team)),
            "attention": [
                _attention(d, status)
                for d, status in selectors.deployments_needing_attention(team=team, deployments=deployments)
            ],
            "jobs": list(selectors.jobs_recent(team=team)),
            "regions": _region_rows(region_traffic(team_id=team.pk), nodes, deployments),
        }
    return render(request, "console/dashboard.html", context)


def _gib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**30:.1f}"


def _node_rows(nodes: list) -> list[dict]:
    """Each node's latest figures as the overview shows them (overview.js formats pushes the same way)."""
    rows = []
    for node in nodes:
        stats = node_stats_payload(node.name, node.inventory, ts=0)
        gpus = [
            {**g, "memory": f"{_gib(g['memory_used'])} / {_gib(g['memory_total'])} GiB",
             "percent": round(g["utilization"] or 0)}
            for g in stats["gpus"]
        ]  # fmt: skip
        cpu = stats["cpu_percent"]
        rows.append({
            "node": node,
            "cpu": "–" if cpu is None else f"{cpu:.0f}%",
            "memory": f"{_gib(stats['memory_used'])} / {_gib(stats['memory_total'])} GiB",
            "gpus": gpus,
        })  # fmt: skip
    return rows


def _region_rows(traffic: list, nodes: list, deployments: list) -> list[dict]:
    rows = []
    for entry in traffic:
        region = entry["region"]
        rows.append({
            **entry,
            "nodes_online": sum(1 for n in nodes if n.region == region and n.status == "online"),
            "deployments": sum(1 for d in deployments if d.region == region),
        })  # fmt: skip
    return rows


def _attention(deployment, status: str) -> dict:
    """Why a deployment is not ready, in words: the scheduler's placement reasons, replica errors, or
    replicas running outside the region it asked for."""
    reasons: list[str] = placement_reasons(getattr(deployment, "placement", None))
    replicas = list(
        deployment.replica_set.select_related("node").only("error", "node__region").order_by("pk")
    )
    reasons += [f"r{r.pk}: {r.error[:160]}" for r in replicas if r.error][:3]
    elsewhere = sorted({r.node.region for r in replicas if r.node.region != deployment.region})
    if elsewhere:
        reasons.append(f"placed in {', '.join(elsewhere).upper()}, not {deployment.region.upper()}")
        note = (deployment.placement or {}).get("note") if isinstance(deployment.placement, dict) else None
        if note and note not in reasons:
            reasons.append(str(note))
    if not replicas and status == "unplaced":
        reasons.append("no node can take a replica yet")
    return {"deployment": deployment, "status": status, "reasons": [r for r in reasons if r],
            "elsewhere": ", ".join(elsewhere).upper()}  # fmt: skip


def placement_reasons(placement) -> list[str]:
    """Up to three of the scheduler's reasons (a string, a list, or per-node reasons in a dict)."""
    if isinstance(placement, dict):
        found = placement.get("reasons", placement.get("reason", placement))
        if isinstance(found, dict):
            return [f"{node}: {why}" for node, why in found.items()][:3]
        placement = found
    if isinstance(placement, list):
        return [str(item) for item in placement][:3]
    return [str(placement)] if placement else []


def plotly_js(request):
    """Plotly's browser bundle, served from the installed `plotly` package (no CDN: consoles run offline)."""
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    response = FileResponse(open(path, "rb"), content_type="application/javascript")
    response["Cache-Control"] = "public, max-age=86400"
    return response
