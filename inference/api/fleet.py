"""The fleet's shares: node pools and what each team is granted of them (install administrators write;
every member reads the pools and their own team's grant). See ``inference.services.fleet``."""

import json
from typing import cast

from ninja import Router, Schema, Status
from pydantic import ValidationError

from accounts.install_admin import install_admin_require
from accounts.models import Team
from core.errors import BadRequest, NotFound, ValidationFailed
from core.schemas import validation_message
from inference.models import FleetGrant, NodePool
from inference.schemas import FleetGrantIn, FleetGrantOut, NodePoolIn, NodePoolOut
from inference.services.fleet import grant_of, grant_set, grant_view, pool_create, pool_delete

router = Router(tags=["fleet"])


def body_schema(schema: type[Schema]) -> dict:
    """The request body's schema for the OpenAPI document (the views read the body themselves)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.model_json_schema()}},
        }
    }


def admin_body(request, schema: type[Schema]) -> Schema:
    """The JSON body as ``schema`` (unknown fields refused, 422), read once the caller is known to be an
    install administrator: everyone else gets the 403 whatever they sent."""
    install_admin_require(request.auth.user)
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise BadRequest("Cannot parse request body") from None
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(validation_message(exc.errors())) from None


@router.get("/pools", response=list[NodePoolOut])
def pool_list(request):
    return list(NodePool.objects.all())


@router.post("/pools", response={201: NodePoolOut}, openapi_extra=body_schema(NodePoolIn))
def pool_new(request):
    """A named part of the shared fleet: nodes whose labels include ``selector``, and named ``nodes``."""
    payload = cast(NodePoolIn, admin_body(request, NodePoolIn))
    pool = pool_create(
        actor=request.auth.user, name=payload.name, selector=payload.selector, nodes=payload.nodes
    )
    return Status(201, pool)


@router.delete("/pools/{pool}", response={204: None})
def pool_remove(request, pool: str):
    pool_delete(actor=request.auth.user, name=pool)
    return Status(204, None)


@router.get("/grant", response=FleetGrantOut)
def grant_mine(request):
    """What the current team may use of the shared fleet (no pools: every shared node)."""
    return grant_of(request.auth.team)


@router.get("/grants", response=list[FleetGrantOut])
def grant_list(request):
    """Every team's grant (install administrators)."""
    install_admin_require(request.auth.user)
    grants = {g.team_id: g for g in FleetGrant.objects.prefetch_related("pools")}
    return [
        {"team": t.name, "team_id": t.pk, **grant_view(grants.get(t.pk))}
        for t in Team.objects.order_by("name")
    ]


@router.put("/grants/{team_id}", response=FleetGrantOut, openapi_extra=body_schema(FleetGrantIn))
def grant_put(request, team_id: int):
    """Replace a team's grant: its pools (empty: every shared node) and caps (null: none)."""
    payload = cast(FleetGrantIn, admin_body(request, FleetGrantIn))
    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        raise NotFound("team not found")
    caps = payload.model_dump(exclude={"pools"})
    grant_set(actor=request.auth.user, team=team, pools=payload.pools, caps=caps)
    return grant_of(team)
