"""Console pages for people: sign-in (throttled), password change, the team page (members and
invitations), the team switcher, accepting an invitation, and the audit log.

Every change goes through `accounts.team_services`, which checks the permission matrix; these views
only turn its refusals into messages.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import login_throttle, selectors, team_services
from accounts.addresses import client_address
from accounts.audit_export import FORMATS, export_response
from accounts.current import SESSION_TEAM_KEY
from accounts.decorators import member_required, permission_required
from accounts.install_admin import install_admin_set, is_install_admin
from accounts.models import Role
from accounts.permissions import membership_allows
from accounts.services import audit_record
from core.errors import ApplicationError


def _throttled(request, retry_after: int) -> HttpResponse:
    response = render(request, "accounts/login_throttled.html", {"retry_after": retry_after}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def _when(raw: str):
    try:
        return parse_datetime(raw) if raw else None
    except ValueError:
        return None


class ThrottledLoginView(auth_views.LoginView):
    """Django's sign-in, refused with 429 and `Retry-After` while the address, the username (from
    unknown browsers) or this browser's device is locked out (`accounts.login_throttle`)."""

    template_name = "accounts/login.html"

    def _attempt(self) -> login_throttle.Attempt:
        username = self.request.POST.get("username", "")
        device = login_throttle.device_of(self.request.COOKIES.get(login_throttle.DEVICE_COOKIE), username)
        return login_throttle.Attempt(username, client_address(self.request.META), device)

    def post(self, request, *args, **kwargs):
        wait = login_throttle.retry_after(self._attempt())
        if wait:
            return _throttled(request, wait)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form):
        username = form.get_user().get_username()
        login_throttle.success_record(self._attempt())
        response = super().form_valid(form)
        response.set_cookie(
            login_throttle.DEVICE_COOKIE, login_throttle.device_cookie(username),
            max_age=login_throttle.DEVICE_MAX_AGE_S, httponly=True, samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
        )  # fmt: skip
        return response

    def form_invalid(self, form):
        attempt = self._attempt()
        if login_throttle.failure_record(attempt):
            audit_record(
                team=None, actor=None, action="login.lockout", target=attempt.username[:150],
                address=attempt.address, data={"known_device": bool(attempt.device)},
            )  # fmt: skip
        return super().form_invalid(form)


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("console:dashboard")

    def form_valid(self, form):
        response = super().form_valid(form)  # keeps this session signed in, ends the others
        team_services.user_password_changed(user=self.request.user)
        messages.success(self.request, "Password changed.")
        return response


@member_required
def team_page(request, membership):
    """Members and their roles; for owners and admins also invitations and the forms that change them."""
    team = membership.team
    context = {
        "members": selectors.team_members(team=team),
        "roles": Role.choices,
        "can_manage": membership_allows(membership, "member.invite"),
        "is_owner": membership_allows(membership, "owner.manage"),
        "viewer_is_install_admin": is_install_admin(request.user),
        "invitations": [],
        "new_link": request.session.pop("new_invitation_link", None),
    }
    if context["can_manage"]:
        now = timezone.now()
        context["invitations"] = [
            (i, i.state_at(now)) for i in selectors.invitations_for_team(team=team)[:100]
        ]
    return render(request, "accounts/team.html", context)


def _team_change(request, membership, action: str | None) -> None:
    post, team, actor = request.POST, membership.team, request.user
    if action == "invite":
        _, token = team_services.invitation_create(
            team=team, actor=actor, role=post.get("role", ""), email=post.get("email", "")
        )
        link = request.build_absolute_uri(reverse("accounts:invitation", args=[token]))
        request.session["new_invitation_link"] = link  # shown once, after the redirect
    elif action == "revoke_invitation":
        team_services.invitation_revoke(team=team, actor=actor, invitation_id=int(post.get("id") or 0))
    elif action == "role":
        team_services.member_role_change(
            team=team, actor=actor, username=post.get("username", ""), role=post.get("role", "")
        )
    elif action == "remove":
        team_services.member_remove(
            team=team,
            actor=actor,
            username=post.get("username", ""),
            reassign_keys=post.get("reassign_keys") == "1",
        )
    else:
        raise ApplicationError("unknown action")


@member_required
@require_POST
def team_action(request, membership):
    action = request.POST.get("action")
    if action == "delete_team":
        try:
            team_services.team_delete(team=membership.team, actor=request.user)
            request.session.pop(SESSION_TEAM_KEY, None)
            messages.success(request, f"Team {membership.team.name} deleted.")
            return redirect("console:dashboard")
        except ApplicationError as exc:
            messages.error(request, exc.message)
            return redirect("accounts:team")
    if action == "install_admin":
        return _install_admin_change(request, membership)
    try:
        _team_change(request, membership, action)
        messages.success(request, "Done.")
    except (ApplicationError, ValueError) as exc:
        messages.error(request, getattr(exc, "message", "invalid input"))
    return redirect("accounts:team")


def _install_admin_change(request, membership):
    """An install administrator gives (or takes) the flag to a member of the team on this page."""
    username, value = request.POST.get("username", ""), request.POST.get("value") == "1"
    target = next(
        (m.user for m in selectors.team_members(team=membership.team) if m.user.username == username), None
    )
    try:
        if target is None:
            raise ApplicationError(f"{username[:150]!r} is not a member of {membership.team.name}")
        install_admin_set(actor=request.user, user=target, value=value)
        state = "is now an install administrator" if value else "is no longer an install administrator"
        messages.success(request, f"{target.username} {state}.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("accounts:team")


@login_required
@require_POST
def team_switch(request):
    """Remember the chosen team in the session; pages, the API and websockets act for it from now on."""
    raw = request.POST.get("team", "")
    membership = selectors.membership_for(user=request.user, team_id=int(raw)) if raw.isdigit() else None
    if membership is None:
        messages.error(request, "You are not a member of that team.")
    else:
        request.session[SESSION_TEAM_KEY] = membership.team_id
    return redirect("console:dashboard")


@login_required
@require_POST
def team_new(request):
    try:
        team = team_services.team_create(name=request.POST.get("name", ""), owner=request.user)
        request.session[SESSION_TEAM_KEY] = team.pk
        messages.success(request, f"Team {team.name} created.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("accounts:team")


@never_cache
def invitation(request, token: str):
    """Open a one-time link: join while signed in, or create an account here and join with it."""
    found = selectors.invitation_by_token(token)
    state = found.state_at(timezone.now()) if found else "invalid"
    if request.method == "POST" and state == "pending":
        try:
            if request.user.is_authenticated:
                team_services.invitation_accept(token=token, user=request.user)
            else:
                user = team_services.invitation_accept_new_user(
                    token=token,
                    username=request.POST.get("username", ""),
                    password=request.POST.get("password", ""),
                )
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session[SESSION_TEAM_KEY] = found.team_id  # type: ignore[union-attr]
            messages.success(request, f"You joined {found.team.name}.")  # type: ignore[union-attr]
            return redirect("console:dashboard")
        except ApplicationError as exc:
            messages.error(request, exc.message)
    status = 200 if state == "pending" else (404 if state == "invalid" else 410)
    return render(request, "accounts/invitation.html", {"invitation": found, "state": state}, status=status)


AUDIT_FILTERS = ("actor", "action", "target", "since", "until")


@permission_required("audit.read")
def audit_page(request, membership):
    """The team's audit log, filtered and sorted; the same filters export CSV or JSON Lines."""
    values = {name: request.GET.get(name, "").strip() for name in AUDIT_FILTERS}
    order = request.GET.get("order", "-created_at")
    events = selectors.audit_events_query(
        team=membership.team,
        actor=values["actor"] or None,
        action=values["action"] or None,
        target=values["target"] or None,
        since=_when(values["since"]),
        until=_when(values["until"]),
        order=order,
    )
    fmt = request.GET.get("format", "")
    if fmt in FORMATS:
        return export_response(events, fmt, team_name=membership.team.name)
    query = urlencode({k: v for k, v in values.items() if v})
    context = {"events": events[:500], "values": values, "order": order, "query": query}
    return render(request, "accounts/audit.html", context)
