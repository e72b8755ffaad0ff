"""API key pages: list with create form; the new secret is rendered once, in the answer to the create, and
never again (it is never written to the session: review L-F)."""

from datetime import timedelta

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts import selectors, services
from accounts.decorators import member_required
from accounts.models import ApiKeyScope
from core import once
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


def _create_from_form(request, membership) -> tuple[str | None, int]:
    """The clear key, or None and the page's status: 200 with the form refilled, or 409 for a replay."""

    def create() -> str:
        return services.api_key_create(
            team=membership.team,
            actor=request.user,
            name=request.POST.get("name", ""),
            scopes=request.POST.getlist("scopes") or [ApiKeyScope.INFERENCE],
            **_limits_from_form(request.POST),
        )[1]

    try:
        return once.submit_once(request, create, shown="key"), 200
    except once.AlreadySubmitted as exc:
        messages.error(request, exc.message)
        return None, exc.status
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return None, 200


@member_required
def key_list(request, membership):
    """The keys page. A create is answered with this page holding the clear key, once and never cached;
    it is written to no session or database row (review L-F). The form's one-time nonce (core.once)
    makes a reload or double submit of that answer create nothing and say the key was shown once."""
    form: QueryDict | None = None
    new_key, status = None, 200
    if request.method == "POST":
        new_key, status = _create_from_form(request, membership)
        if new_key is None and status == 200:
            form = request.POST  # refused: the form keeps what was typed
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
         "charts": charts, "now": timezone.now(), "form": form, "form_nonce": once.new_nonce(), "form_scopes": form.getlist("scopes") if form else [], "show_revoked": show_revoked,
         "revoked_count": sum(1 for k in every if k.revoked_at)},
        status=status,
    )  # fmt: skip
    if request.method == "POST":  # the answer that holds a clear key: out of every cache (L9, L-F)
        once.no_store(response)
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
