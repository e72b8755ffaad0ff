"""API key pages: list with create form; the new secret is rendered once and never again."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts import keycache, selectors, services
from accounts.decorators import member_required
from accounts.models import ApiKeyScope
from core.errors import ApplicationError
from core.forms import optional_number


@member_required
def key_list(request, membership):
    new_key = None
    if request.method == "POST":
        scopes = request.POST.getlist("scopes") or [ApiKeyScope.INFERENCE]
        try:
            _, new_key = services.api_key_create(
                team=membership.team,
                actor=request.user,
                name=request.POST.get("name", ""),
                scopes=scopes,
                rate_per_s=optional_number(request.POST, "rate_per_s", float),
                burst=optional_number(request.POST, "burst", int),
            )
        except ApplicationError as exc:
            messages.error(request, exc.message)
    keys = list(selectors.api_keys_for_team(team=membership.team))
    usage = keycache.usage_for([k.pk for k in keys])
    for key in keys:
        key.usage = usage.get(key.pk, {})
    return render(
        request,
        "accounts/keys.html",
        {"keys": keys, "new_key": new_key, "scopes": ApiKeyScope.choices, "can_write": membership.can_write},
    )


@member_required
@require_POST
def key_revoke(request, membership, key_id: int):
    try:
        api_key = services.api_key_revoke(team=membership.team, actor=request.user, key_id=key_id)
        messages.success(request, f"Key {api_key.prefix} revoked.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("accounts:keys")
