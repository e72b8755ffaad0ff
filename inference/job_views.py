"""The jobs page: every job of the team across models (sortable, live progress) and a "start a job" form
generated in the browser from each kind's options schema (`inference.jobs.registry`)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.shortcuts import redirect, render

from accounts.decorators import member_required
from core.errors import ApplicationError, ValidationFailed
from core.forms import form_int
from inference import selectors
from inference.jobs.registry import kind_label, kinds
from inference.models import JobStatus
from inference.services.jobs import job_start

STATUS_FILTERS = ("active", *JobStatus.values)


def kind_forms() -> dict[str, dict]:
    """Per startable kind: its label, its options' JSON schema and the recommended values per task."""
    # Heavy (numpy, onnx tooling): imported only by the page that needs it, not by every console process.
    from inference.conversion.quantize import RECOMMENDED

    out = {}
    for name, kind in kinds(startable=True).items():
        recommended = (
            {task: dict(values) for task, values in RECOMMENDED.items()} if name == "quantize_int8" else {}
        )
        out[name] = {
            "label": kind.label,
            "needs_onnx": kind.needs_onnx,
            "schema": kind.Options.model_json_schema(),
            "recommended": recommended,
        }
    return out


def _options_from(post) -> dict:
    raw = post.get("options", "").strip()
    try:
        options = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"options must be JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(options, dict):
        raise ValidationFailed("options must be a JSON object")
    return options


@member_required
def job_list(request, membership):
    """GET: the jobs list. POST: start a job from the form; a refused one comes back with what was typed."""
    form = None
    if request.method == "POST":
        try:
            source = selectors.version_get(
                team=membership.team, version_id=form_int(request.POST, "version_id")
            )
            job = job_start(
                team=membership.team,
                actor=request.user,
                source=source,
                kind=request.POST.get("kind", ""),
                options=_options_from(request.POST),
            )
            messages.success(request, f"Job #{job.pk} queued: {kind_label(job.kind)} of {source}.")
            return redirect("inference:job-detail", job_id=job.pk)
        except ApplicationError as exc:
            messages.error(request, exc.message)
            form = request.POST
    status = request.GET.get("status", "")
    if status not in STATUS_FILTERS:
        status = ""
    versions = list(selectors.versions_for_team(team=membership.team))
    context = {
        "jobs": selectors.jobs_list(team=membership.team, status=status)[:200],
        "status": status,
        "statuses": STATUS_FILTERS,
        "form": form,
        "can_write": membership.can_write,
        "versions": versions,
        "selected_version": (form or request.GET).get("version", "") or (form or {}).get("version_id", ""),
        "kind_forms": kind_forms(),
    }
    return render(request, "inference/jobs.html", context, status=400 if form is not None else 200)
