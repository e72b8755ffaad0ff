"""Console pages for models and deployments. Writes go through the same services as the API."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.selectors import membership_for
from core.errors import ApplicationError
from inference import selectors
from inference.models import Device, JobKind, Region, Task
from inference.services.deployments import (
    DeploymentSpec,
    deployment_create,
    deployment_delete,
    deployment_update,
)
from inference.services.jobs import job_cancel, job_retry, job_start


def _membership(request):
    membership = membership_for(user=request.user)
    if membership is None:
        raise Http404("you are not a member of any team")
    return membership


@login_required
def model_detail(request, name: str):
    """Versions side by side (size, speed, agreement), the trade-off chart, and the model's jobs, live."""
    import json

    from inference.jobs.quantize import recommended_options
    from inference.reports import chart_points, version_rows

    membership = _membership(request)
    try:
        model = selectors.model_get(team=membership.team, name=name)
    except ApplicationError:
        raise Http404("model not found") from None
    versions = list(model.versions.all())
    rows = version_rows(versions)
    try:
        recommended = recommended_options(model.task)
    except ValueError:
        recommended = {}
    context = {
        "model": model, "rows": rows, "points": chart_points(rows), "can_write": membership.can_write,
        "jobs": selectors.jobs_for_team(team=membership.team).filter(source__model=model)[:50],
        "kinds": [c for c in JobKind.choices if c[0] != JobKind.IMPORT],
        "recommended": json.dumps(recommended),
    }
    return render(request, "inference/model_detail.html", context)


@login_required
def job_detail(request, job_id: int):
    import json

    membership = _membership(request)
    try:
        job = selectors.job_get(team=membership.team, job_id=job_id)
    except ApplicationError:
        raise Http404("job not found") from None
    context = {"job": job, "can_write": membership.can_write, "options_json": json.dumps(job.options, indent=2),
               "result_json": json.dumps(job.result, indent=2) if job.result else ""}
    return render(request, "inference/job_detail.html", context)


@login_required
@require_POST
def job_action(request, job_id: int):
    membership = _membership(request)
    try:
        job = selectors.job_get(team=membership.team, job_id=job_id)
        if request.POST.get("action") == "cancel":
            job_cancel(team=membership.team, actor=request.user, job=job)
        else:
            job_retry(team=membership.team, actor=request.user, job=job)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("inference:model-list")
    return redirect("inference:job-detail", job_id=job.pk)


@login_required
@require_POST
def job_new(request, name: str):
    import json

    membership = _membership(request)
    try:
        source = selectors.version_get(team=membership.team, version_id=_int(request.POST.get("version_id"), 0))
        raw = request.POST.get("options", "").strip()
        try:
            options = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise ApplicationError("options must be JSON") from None
        job_start(team=membership.team, actor=request.user, source=source, kind=request.POST.get("kind", ""),
                  options=options)
        messages.success(request, "Job queued.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("inference:model-detail", name=name)


@login_required
def model_list(request):
    membership = _membership(request)
    models = selectors.models_for_team(team=membership.team)
    return render(request, "inference/models.html",
                  {"models": models, "tasks": Task.choices, "can_write": membership.can_write})


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@login_required
def deployment_list(request):
    membership = _membership(request)
    if request.method == "POST":
        post = request.POST
        spec = DeploymentSpec(
            name=post.get("name", "").strip(), model_version_id=_int(post.get("model_version_id"), 0),
            replicas=_int(post.get("replicas"), 1), region=post.get("region", Region.HK),
            device=post.get("device", Device.CPU), max_batch_size=_int(post.get("max_batch_size"), 8),
            max_queue_delay_ms=_int(post.get("max_queue_delay_ms"), 5),
        )
        try:
            deployment_create(team=membership.team, actor=request.user, spec=spec)
            messages.success(request, f"Deployment {spec.name} created; placing replicas.")
            return redirect("inference:deployment-list")
        except ApplicationError as exc:
            messages.error(request, exc.message)
    context = {
        "deployments": selectors.deployments_for_team(team=membership.team),
        "versions": selectors.versions_for_team(team=membership.team),
        "regions": Region.choices, "devices": Device.choices, "can_write": membership.can_write,
    }
    return render(request, "inference/deployments.html", context)


@login_required
def deployment_detail(request, name: str):
    """Replicas and live charts (latency percentiles, throughput, batch size, queue) pushed every second."""
    membership = _membership(request)
    try:
        deployment = selectors.deployment_get(team=membership.team, name=name)
    except ApplicationError:
        raise Http404("deployment not found") from None
    context = {"d": deployment, "status": selectors.deployment_status(deployment), "can_write": membership.can_write,
               "versions": selectors.versions_for_team(team=membership.team).filter(model=deployment.model_version.model)}
    return render(request, "inference/deployment_detail.html", context)


@login_required
@require_POST
def deployment_action(request, name: str):
    membership = _membership(request)
    try:
        deployment = selectors.deployment_get(team=membership.team, name=name)
        action = request.POST.get("action")
        if action == "delete":
            deployment_delete(team=membership.team, actor=request.user, deployment=deployment)
        elif action in ("pause", "resume"):
            state = "paused" if action == "pause" else "running"
            deployment_update(team=membership.team, actor=request.user, deployment=deployment, desired_state=state)
        elif action == "scale":
            deployment_update(team=membership.team, actor=request.user, deployment=deployment,
                              replicas=_int(request.POST.get("replicas"), -1))
        elif action == "version":
            deployment_update(team=membership.team, actor=request.user, deployment=deployment,
                              model_version_id=_int(request.POST.get("model_version_id"), 0))
        else:
            raise ApplicationError("unknown action")
        messages.success(request, f"{name}: {action} done.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    if request.POST.get("next") == "detail" and request.POST.get("action") != "delete":
        return redirect("inference:deployment-detail", name=name)
    return redirect("inference:deployment-list")
