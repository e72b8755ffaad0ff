"""Deployments: create, list, show, scale or pause, delete."""

from ninja import Router, Status

from inference import selectors
from inference.schemas import DeploymentIn, DeploymentOut, DeploymentPatch
from inference.services.deployments import (
    DeploymentSpec,
    deployment_create,
    deployment_delete,
    deployment_update,
)

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
    """Scale (`replicas`), pause or resume (`state`), or roll over to another version of the same model
    (`model_version_id`); a version of another model is refused with 422."""
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_update(
        team=request.auth.team,
        actor=request.auth.user,
        deployment=deployment,
        replicas=payload.replicas,
        desired_state=payload.state,
        model_version_id=payload.model_version_id,
    )
    return selectors.deployment_get(team=request.auth.team, name=name)


@router.delete("/{name}", response={204: None})
def deployment_remove(request, name: str):
    deployment = selectors.deployment_get(team=request.auth.team, name=name)
    deployment_delete(team=request.auth.team, actor=request.auth.user, deployment=deployment)
    return Status(204, None)
