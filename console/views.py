"""Dashboard and the console's own health endpoints."""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import FileResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts import keycache
from accounts.current import membership_for_request
from inference import selectors


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
    return JsonResponse({"status": "ready"})


@login_required
def dashboard(request):
    membership = membership_for_request(request)
    context = {"deployments": [], "models": [], "nodes": list(selectors.nodes_all())}
    if membership:
        context["deployments"] = list(selectors.deployments_for_team(team=membership.team))
        context["models"] = list(selectors.models_for_team(team=membership.team))
    return render(request, "console/dashboard.html", context)


def plotly_js(request):
    """Plotly's browser bundle, served from the installed `plotly` package (no CDN: consoles run offline)."""
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    response = FileResponse(open(path, "rb"), content_type="application/javascript")
    response["Cache-Control"] = "public, max-age=86400"
    return response
