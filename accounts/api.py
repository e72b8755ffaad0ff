"""API keys: create (the secret is in this one answer only), list, change limits, usage, revoke."""

from ninja import Field, Query, Router, Schema, Status

from accounts import selectors, services
from accounts.schemas import ApiKeyCreatedOut, ApiKeyIn, ApiKeyOut, ApiKeyPatch, ApiKeyUsageOut

router = Router(tags=["api keys"])


class UsageQuery(Schema):
    days: int = Field(default=30, ge=1, le=400, description="how many days back, 1 to 400")


@router.get("", response=list[ApiKeyOut])
def key_list(request):
    return list(selectors.api_keys_for_team(team=request.auth.team))


@router.post("", response={201: ApiKeyCreatedOut})
def key_create(request, payload: ApiKeyIn):
    api_key, clear = services.api_key_create(
        team=request.auth.team, actor=request.auth.user, **payload.model_dump()
    )
    return Status(201, {**ApiKeyOut.from_orm(api_key).model_dump(), "key": clear})


@router.patch("/{key_id}", response=ApiKeyOut)
def key_update(request, key_id: int, payload: ApiKeyPatch):
    changes = payload.model_dump(exclude_unset=True)
    return services.api_key_update(
        team=request.auth.team, actor=request.auth.user, key_id=key_id, changes=changes
    )


@router.get("/{key_id}/usage", response=ApiKeyUsageOut)
def key_usage(request, key_id: int, query: Query[UsageQuery]):
    """This month's totals and the rolled-up usage per day over the last `days` days (1 to 400)."""
    api_key = selectors.api_key_for_team(team=request.auth.team, key_id=key_id)
    month = selectors.api_key_month_totals(key_ids=[api_key.pk])[api_key.pk]
    return {
        "key_id": api_key.pk,
        "month": month,
        "days": selectors.api_key_usage_by_day(api_key=api_key, days=query.days),
    }


@router.delete("/{key_id}", response=ApiKeyOut)
def key_revoke(request, key_id: int):
    return services.api_key_revoke(team=request.auth.team, actor=request.auth.user, key_id=key_id)
