"""Console pages for models and deployments. Writes go through the same services as the API."""

import json

from django.contrib import messages
from django.http import Http404, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.decorators import member_required, team_object_or_404
from core.errors import ApplicationError
from core.forms import form_int, optional_number
from inference import selectors
from inference.jobs.registry import kind_choices
from inference.models import Device, Task
from inference.node_views import labels_text, parse_labels
from inference.reports import benchmark_table, chart_points, public_result, version_rows
from inference.selectors import region_choices
from inference.services.autoscale import deployment_autoscaling_set
from inference.services.canary import canary_figures
from inference.services.deployments import (
    DeploymentSpec,
    deployment_create,
    deployment_delete,
    deployment_update,
)
from inference.services.jobs import job_cancel, job_retry, job_start


@member_required
def model_detail(request, membership, name: str):
    """Versions side by side (size, speed, agreement), the trade-off chart, and the model's jobs, live."""
    # Heavy (numpy, onnx tooling): imported only by the page that needs it, not by every console process.
    from inference.conversion.quantize import recommended_options

    model = team_object_or_404(selectors.model_get, membership=membership, name=name)
    versions = list(model.versions.all())
    rows = version_rows(versions)
    try:
        recommended = recommended_options(model.task)
    except ValueError:
        recommended = {}
    context = {
        "model": model,
        "rows": rows,
        "points": chart_points(rows),
        "can_write": membership.can_write,
        "jobs": selectors.jobs_for_team(team=membership.team).filter(source__model=model)[:50],
        "kinds": kind_choices(startable=True),
        "recommended": json.dumps(recommended),
    }
    return render(request, "inference/model_detail.html", context)


@member_required
def job_detail(request, membership, job_id: int):
    job = team_object_or_404(selectors.job_get, membership=membership, job_id=job_id)
    result = public_result(job.result or {})
    figures = benchmark_table(result)
    shown = {key: value for key, value in result.items() if key != "disagreements"}
    context = {
        "job": job,
        "can_write": membership.can_write,
        "options_json": json.dumps(public_result(job.options), indent=2),
        "figures": figures,
        # Other kinds' results (and what a benchmark holds besides its figures) stay JSON, without paths.
        # The listed disagreements are a download of their own (job_disagreements), not part of this JSON.
        "result_json": json.dumps(shown, indent=2) if shown and not figures else "",
        "disagreements": (result.get("disagreements") or {}).get("count"),
    }
    return render(request, "inference/job_detail.html", context)


@member_required
def job_disagreements(request, membership, job_id: int):
    """The examples where a job's converted model and its parent disagree (evaluate, INT8), as JSON."""
    job = team_object_or_404(selectors.job_get, membership=membership, job_id=job_id)
    result = public_result(job.result or {})
    found = result.get("disagreements")
    if not found:
        raise Http404("this job's report lists no disagreements")
    body = {
        "job": job.pk,
        "kind": job.kind,
        "version": str(job.output or job.source),
        "dataset": result.get("dataset") or (result.get("tuning") or {}).get("dataset"),
        "accuracy": (result.get("agreement") or {}).get("accuracy"),
        **found,
    }
    response = JsonResponse(body, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-disagreements.json"'
    return response


@member_required
@require_POST
def job_action(request, membership, job_id: int):
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


@member_required
@require_POST
def job_new(request, membership, name: str):
    try:
        version_id = form_int(request.POST, "version_id")
        source = selectors.version_get(team=membership.team, version_id=version_id)
        raw = request.POST.get("options", "").strip()
        try:
            options = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise ApplicationError("options must be JSON") from None
        job_start(
            team=membership.team,
            actor=request.user,
            source=source,
            kind=request.POST.get("kind", ""),
            options=options,
        )
        messages.success(request, "Job queued.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("inference:model-detail", name=name)


@member_required
def model_list(request, membership):
    models = selectors.models_for_team(team=membership.team)
    return render(
        request,
        "inference/models.html",
        {"models": models, "tasks": Task.choices, "can_write": membership.can_write},
    )


def _spec_from_form(post) -> DeploymentSpec:
    """The create form's fields; blank numbers take the API's defaults, malformed ones are refused."""
    return DeploymentSpec(
        name=post.get("name", "").strip(),
        model_version_id=form_int(post, "model_version_id"),
        replicas=form_int(post, "replicas", default=1),
        region=post.get("region", ""),  # "": the first region in failover order
        device=post.get("device", Device.CPU),
        max_batch_size=form_int(post, "max_batch_size", default=8),
        max_queue_delay_ms=form_int(post, "max_queue_delay_ms", default=5),
        node_selector=parse_labels(post.get("node_selector", "")),
    )


def _create_defaults() -> dict:
    """What the create form shows before anything is typed: the API's defaults (DeploymentSpec)."""
    spec = DeploymentSpec
    return {"replicas": spec.replicas, "region": spec.region, "device": spec.device, "node_selector": "",
            "max_batch_size": spec.max_batch_size, "max_queue_delay_ms": spec.max_queue_delay_ms}  # fmt: skip


def _settings_from_form(post) -> dict:
    """The deployment page's settings form: how replicas run (batching, device, region, node labels)."""
    return {
        "max_batch_size": form_int(post, "max_batch_size"),
        "max_queue_delay_ms": form_int(post, "max_queue_delay_ms"),
        "device": post.get("device", ""),
        "region": post.get("region", ""),
        "node_selector": parse_labels(post.get("node_selector", "")),
    }


def call_example(base: str, name: str, task: str) -> str:
    """A curl line that calls deployment `name` the way its kind of model is called."""
    auth = '-H "Authorization: Bearer $LANTAU_KEY"'
    if task == Task.FEATURE_EXTRACTION:
        body = json.dumps({"model": name, "input": ["a sentence to embed"]})
        return f"curl -s {auth} -H \"Content-Type: application/json\" \\\n  -d '{body}' {base}/v1/embeddings"
    if task == Task.TEXT_GENERATION:
        body = json.dumps({"model": name, "messages": [{"role": "user", "content": "Hello!"}]})
        return f"curl -s {auth} -H \"Content-Type: application/json\" \\\n  -d '{body}' {base}/v1/chat/completions"
    if task == Task.TEXT_CLASSIFICATION:
        body = json.dumps({"inputs": ["a sentence to classify"]})
        return (
            f'curl -s {auth} -H "Content-Type: application/json" \\\n'
            f"  -d '{body}' {base}/v1/deployments/{name}/predict"
        )
    return (
        f'curl -s {auth} -H "Content-Type: image/jpeg" \\\n'
        f"  --data-binary @cat.jpg {base}/v1/deployments/{name}/predict"
    )


@member_required
def deployment_list(request, membership):
    form: QueryDict | None = None
    if request.method == "POST":
        try:
            spec = _spec_from_form(request.POST)
            deployment_create(team=membership.team, actor=request.user, spec=spec)
            messages.success(request, f"Deployment {spec.name} created; placing replicas.")
            return redirect("inference:deployment-list")
        except ApplicationError as exc:
            messages.error(request, exc.message)
            form = request.POST  # the form comes back with what was typed
    deployments = selectors.deployments_with_state_counts(team=membership.team)
    base = f"{request.scheme}://{request.get_host()}"
    examples = [
        {"name": d.name, "task": d.model_version.model.get_task_display(),
         "curl": call_example(base, d.name, d.model_version.model.task)}
        for d in deployments
    ] or [{"name": "", "task": "Image classification", "curl": call_example(base, "<name>", Task.IMAGE_CLASSIFICATION)}]  # fmt: skip
    context = {
        "form": form,
        "initial": form if form is not None else _create_defaults(),
        "examples": examples,
        "deployments": deployments,
        "versions": selectors.versions_for_team(team=membership.team),
        "regions": region_choices(),
        "devices": Device.choices,
        "can_write": membership.can_write,
    }
    return render(request, "inference/deployments.html", context)


@member_required
def deployment_detail(request, membership, name: str):
    """Replicas and live charts (latency percentiles, throughput, batch size, queue) pushed every second."""
    deployment = team_object_or_404(selectors.deployment_get, membership=membership, name=name)
    context = {
        "d": deployment,
        "status": selectors.deployment_status(deployment),
        "can_write": membership.can_write,
        "regions": region_choices(),
        "devices": Device.choices,
        "settings": {
            "region": deployment.region,
            "device": deployment.device,
            "max_batch_size": deployment.max_batch_size,
            "max_queue_delay_ms": deployment.max_queue_delay_ms,
            "node_selector": labels_text(deployment.node_selector),
        },  # fmt: skip
        "versions": selectors.versions_for_team(team=membership.team).filter(
            model=deployment.model_version.model
        ),
        "canary": _canary_rows(deployment),
    }
    return render(request, "inference/deployment_detail.html", context)


def _canary_rows(deployment) -> list[dict] | None:
    """Both versions of a canary side by side (``canary_figures``), as the page's table shows them."""
    figures = canary_figures(deployment)
    if figures is None:
        return None
    versions = {"stable": str(deployment.model_version), "canary": figures["version"]}
    return [{"side": side, "version": versions[side], **figures[side]} for side in ("stable", "canary")]


def _deployment_change(request, membership, deployment, action: str | None) -> None:
    """Apply one action from the deployment pages' buttons and forms."""
    post, team, actor = request.POST, membership.team, request.user
    if action == "delete":
        deployment_delete(team=team, actor=actor, deployment=deployment)
    elif action in ("pause", "resume"):
        state = "paused" if action == "pause" else "running"
        deployment_update(team=team, actor=actor, deployment=deployment, desired_state=state)
    elif action == "scale":
        deployment_update(team=team, actor=actor, deployment=deployment, replicas=form_int(post, "replicas"))
    elif action == "settings":  # a change of how replicas run rolls them over one at a time
        deployment_update(team=team, actor=actor, deployment=deployment, **_settings_from_form(post))
    elif action == "version":
        deployment_update(
            team=team, actor=actor, deployment=deployment, model_version_id=form_int(post, "model_version_id")
        )
    elif action == "autoscaling":  # max 0 turns it off; min 0 lets it scale to zero when idle
        target = optional_number(post, "target_inflight_per_replica", float)
        deployment_autoscaling_set(
            team=team, actor=actor, deployment=deployment,
            min_replicas=form_int(post, "min_replicas", default=deployment.min_replicas),
            max_replicas=form_int(post, "max_replicas", default=0),
            target_inflight_per_replica=deployment.target_inflight_per_replica if target is None else target,
            scale_cooldown_s=form_int(post, "scale_cooldown_s", default=deployment.scale_cooldown_s),
            scale_to_zero_after_s=form_int(post, "scale_to_zero_after_s", default=deployment.scale_to_zero_after_s),
        )  # fmt: skip
    else:
        raise ApplicationError("unknown action")


@member_required
@require_POST
def deployment_action(request, membership, name: str):
    action = request.POST.get("action")
    try:
        deployment = selectors.deployment_get(team=membership.team, name=name)
        _deployment_change(request, membership, deployment, action)
        messages.success(request, f"{name}: {action} done.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    if request.POST.get("next") == "detail" and action != "delete":
        return redirect("inference:deployment-detail", name=name)
    return redirect("inference:deployment-list")
