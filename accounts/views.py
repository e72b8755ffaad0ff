"""API key pages: list with create form; the new secret is rendered once (after a redirect) and never again."""

from datetime import timedelta

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts import selectors, services
from accounts.decorators import member_required
from accounts.models import ApiKeyScope
from core.errors import ApplicationError, ValidationFailed
from core.forms import optional_number


def _limits_from_form(post) -> dict:
    """The key limits typed into the create form; malformed numbers are refused (core.forms)."""
    days = optional_number(post, "expires_days", int)
    if days is not None and not 1 <= days <= 3650:
        raise ValidationFailed("expires_days must be between 1 and 3650")
    deployments = [n.strip() for n in post.get("deployments", "").split(",") if n.strip()]
    return {
        "rate_per_s": optional_number(post, "rate_per_s", float),
        "burst": optional_number(post, "burst", int),
        "deployments": deployments,
        "expires_at": timezone.now() + timedelta(days=days) if days else None,
        **{f: optional_number(post, f, int) for f in ("quota_requests", "quota_images", "quota_tokens")},
    }


def _create_from_form(request, membership) -> str | None:
    try:
        _, clear = services.api_key_create(
            team=membership.team,
            actor=request.user,
            name=request.POST.get("name", ""),
            scopes=request.POST.getlist("scopes") or [ApiKeyScope.INFERENCE],
            **_limits_from_form(request.POST),
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return None
    return clear


NEW_KEY_SESSION = "lantau_new_api_key"


@member_required
def key_list(request, membership):
    """The keys page. A create is answered with a redirect (reloading cannot make a second key); the
    clear key waits in the session for that one next page, which shows it once and forgets it."""
    if request.method == "POST":
        form: QueryDict | None = request.POST
        clear = _create_from_form(request, membership)
        if clear is not None:
            request.session[NEW_KEY_SESSION] = clear
            return redirect("accounts:keys")
    else:
        form = None
    new_key = request.session.pop(NEW_KEY_SESSION, None)
    show_revoked = request.GET.get("revoked") == "1"
    every = list(selectors.api_keys_for_team(team=membership.team))
    keys = every if show_revoked else [k for k in every if not k.revoked_at]
    ids = [k.pk for k in keys]
    month, daily = (
        selectors.api_key_month_totals(key_ids=ids),
        selectors.api_keys_usage_by_day(key_ids=ids, days=30),
    )
    last_uses = selectors.api_key_last_uses(keys=keys)
    for key in keys:
        key.usage = month.get(key.pk, {})
        key.last_use_at, key.last_use_address = last_uses.get(key.pk, (None, None))
    charts = {
        str(k): [{"day": d["day"].isoformat(), "requests": d["requests"]} for d in v]
        for k, v in daily.items()
    }
    response = render(
        request,
        "accounts/keys.html",
        {"keys": keys, "new_key": new_key, "scopes": ApiKeyScope.choices, "can_write": membership.can_write,
         "charts": charts, "now": timezone.now(), "form": form, "form_scopes": form.getlist("scopes") if form else [], "show_revoked": show_revoked,
         "revoked_count": sum(1 for k in every if k.revoked_at)},
    )  # fmt: skip
    if new_key:  # the one page that holds a clear key: keep it out of every cache (review finding L9)
        response["Cache-Control"] = "no-store"
    return response


@member_required
@require_POST
def key_revoke(request, membership, key_id: int):
    try:
        api_key = services.api_key_revoke(team=membership.team, actor=request.user, key_id=key_id)
        messages.success(request, f"Key {api_key.prefix} revoked.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("accounts:keys")
