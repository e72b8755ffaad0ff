"""API keys: create (the secret is in this one answer only), list, revoke."""

from ninja import Router, Status

from accounts import selectors, services
from accounts.schemas import ApiKeyCreatedOut, ApiKeyIn, ApiKeyOut

router = Router(tags=["api keys"])


@router.get("", response=list[ApiKeyOut])
def key_list(request):
    return list(selectors.api_keys_for_team(team=request.auth.team))


@router.post("", response={201: ApiKeyCreatedOut})
def key_create(request, payload: ApiKeyIn):
    api_key, clear = services.api_key_create(
        team=request.auth.team,
        actor=request.auth.user,
        name=payload.name,
        scopes=payload.scopes,
        rate_per_s=payload.rate_per_s,
        burst=payload.burst,
    )
    return Status(201, {**ApiKeyOut.from_orm(api_key).model_dump(), "key": clear})


@router.delete("/{key_id}", response=ApiKeyOut)
def key_revoke(request, key_id: int):
    return services.api_key_revoke(team=request.auth.team, actor=request.auth.user, key_id=key_id)
