"""Deployments: create, list, show, scale or pause, roll out and back, canaries, delete."""

from ninja import Router, Status

from inference import selectors
from inference.schemas import AutoscalingIn, CanaryIn, DeploymentIn, DeploymentOut, DeploymentPatch
from inference.services.autoscale import deployment_autoscaling_set
from inference.services.canary import (
    deployment_canary_abort,
    deployment_canary_promote,
    deployment_canary_start,
)
from inference.services.deployments import (
    DeploymentSpec,
    deployment_create,
    deployment_delete,
    deployment_update,
)
from inference.services.rollouts import deployment_rollback

router = Router(tags=["deployments"])


@router.get("", response=list[DeploymentOut])
def deployment_list(request):
    return list(selectors.deployments_for_team(team=request.auth.team))


@router.post("", response={201: DeploymentOut})
def deployment_new(request, payload: DeploymentIn):
    deployment = deployment_create(
        team=request.auth.team, actor=request.auth.user, spec=DeploymentSpec(**payload.dict())
    )
    return Status(201, selectors.deployment_get(team=request.auth.team, name=deployment.name))


@router.get("/{name}", response=DeploymentOut)
def deployment_show(request, name: str):
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.patch("/{name}", response=DeploymentOut)
def deployment_change(request, name: str, payload: DeploymentPatch):
    """Scale (`replicas`), pause or resume (`state`), roll over to another version of the same model
    (`model_version_id`; another model's is refused with 422), or change how replicas run (`device`,
    `max_batch_size`, `max_queue_delay_ms`, `region`, `node_selector`): replicas are replaced one at a
    time, each old one retiring once a new one is ready."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_update(
        team=request.auth.team,
        actor=request.auth.user,
        deployment=deployment,
        replicas=payload.replicas,
        desired_state=payload.state,
        model_version_id=payload.model_version_id,
        max_batch_size=payload.max_batch_size,
        max_queue_delay_ms=payload.max_queue_delay_ms,
        device=payload.device,
        region=payload.region,
        node_selector=payload.node_selector,
    )
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.post("/{name}/rollback", response=DeploymentOut)
def deployment_roll_back(request, name: str):
    """Return to the settings before the last rollout (running or done; 409 when there is none): the
    reconciler replaces replicas one at a time, the current ones serving meanwhile."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_rollback(team=request.auth.team, actor=request.auth.user, deployment=deployment)
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.post("/{name}/canary", response=DeploymentOut)
def deployment_canary(request, name: str, payload: CanaryIn):
    """Run another version of the same model on extra replicas taking about `percent` (1-50) of requests,
    or change a running canary's share; 409 while a rollout runs or another canary does."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_canary_start(team=request.auth.team, actor=request.auth.user, deployment=deployment,
                            model_version_id=payload.model_version_id, percent=payload.percent)  # fmt: skip
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.post("/{name}/canary/promote", response=DeploymentOut)
def deployment_canary_promoted(request, name: str):
    """Make the canary's version the deployment's (a rollout, replica by replica); 409 without a canary."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_canary_promote(team=request.auth.team, actor=request.auth.user, deployment=deployment)
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.post("/{name}/canary/abort", response=DeploymentOut)
def deployment_canary_aborted(request, name: str):
    """End the canary: its replicas retire; 409 without a canary."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_canary_abort(team=request.auth.team, actor=request.auth.user, deployment=deployment)
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.put("/{name}/autoscaling", response=DeploymentOut)
def deployment_autoscaling(request, name: str, payload: AutoscalingIn):
    """Scale between `min_replicas` and `max_replicas` to keep about `target_inflight_per_replica`
    requests in flight per replica, one change per `scale_cooldown_s`; `max_replicas` 0 turns it off."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_autoscaling_set(team=request.auth.team, actor=request.auth.user, deployment=deployment,
                               **payload.dict())  # fmt: skip
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.delete("/{name}", response={204: None})
def deployment_remove(request, name: str):
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_delete(team=request.auth.team, actor=request.auth.user, deployment=deployment)
    return Status(204, None)
