"""API key pages: list with create form; the new secret is rendered once and never again."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts import keycache, selectors, services
from accounts.models import ApiKeyScope
from core.errors import ApplicationError


def _number(raw: str | None, kind):
    """An optional number from a form field; a malformed one is refused rather than ignored."""
    if raw is None or not raw.strip():
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ApplicationError(f"{raw!r} is not a number") from None


def _membership_or_404(request):
    from django.http import Http404

    membership = selectors.membership_for(user=request.user)
    if membership is None:
        raise Http404("you are not a member of any team")
    return membership


@login_required
def key_list(request):
    membership = _membership_or_404(request)
    new_key = None
    if request.method == "POST":
        scopes = request.POST.getlist("scopes") or [ApiKeyScope.INFERENCE]
        try:
            _, new_key = services.api_key_create(team=membership.team, actor=request.user,
                                                 name=request.POST.get("name", ""), scopes=scopes,
                                                 rate_per_s=_number(request.POST.get("rate_per_s"), float),
                                                 burst=_number(request.POST.get("burst"), int))
        except ApplicationError as exc:
            messages.error(request, exc.message)
    keys = list(selectors.api_keys_for_team(team=membership.team))
    usage = keycache.usage_for([k.pk for k in keys])
    for key in keys:
        key.usage = usage.get(key.pk, {})
    return render(request, "accounts/keys.html",
                  {"keys": keys, "new_key": new_key, "scopes": ApiKeyScope.choices, "can_write": membership.can_write})


@login_required
@require_POST
def key_revoke(request, key_id: int):
    membership = _membership_or_404(request)
    try:
        api_key = services.api_key_revoke(team=membership.team, actor=request.user, key_id=key_id)
        messages.success(request, f"Key {api_key.prefix} revoked.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("accounts:keys")
