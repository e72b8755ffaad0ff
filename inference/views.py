"""Console pages for models and deployments. Writes go through the same services as the API."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.selectors import membership_for
from console.errors import ApplicationError
from inference import selectors
from inference.models import Device, Region, Task
from inference.services.deployments import (
    DeploymentSpec,
    deployment_create,
    deployment_delete,
    deployment_update,
)


def _membership(request):
    membership = membership_for(user=request.user)
    if membership is None:
        raise Http404("you are not a member of any team")
    return membership


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
        else:
            raise ApplicationError("unknown action")
        messages.success(request, f"{name}: {action} done.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("inference:deployment-list")
