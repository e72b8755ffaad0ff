"""Writes for teams, their members and invitations. Each checks the permission matrix and is audited.

Rules beyond the matrix, kept here next to the checks: only owners grant, take or remove the owner
role; a team always keeps one owner; a removed member's keys for the team are revoked (or handed to
whoever removed them); a member demoted to viewer loses their `manage` keys.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from accounts import keycache
from accounts.models import ApiKey, ApiKeyScope, Invitation, Membership, Role, Team
from accounts.permissions import ROLE_RANK, permission_require
from accounts.selectors import invitation_token_hash
from accounts.services import api_key_revoke, audit_record
from core.errors import Conflict, NotFound, ValidationFailed

User = get_user_model()
USERNAME_RE = re.compile(r"[\w.@+-]{1,150}")


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise ValidationFailed(f"role must be one of {', '.join(Role.values)}")


@transaction.atomic
def team_create(*, name: str, owner) -> Team:
    """Create a team with `owner` as its first member."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed("team name must be 1 to 100 characters")
    if Team.objects.filter(name__iexact=name).exists():
        raise Conflict("that team name is taken; choose another")
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    audit_record(team=team, actor=owner, action="team.create", target=name, after={"name": name})
    return team


def team_delete(*, team: Team, actor) -> None:
    """Delete the team with everything it owns; its API keys stop working at once."""
    permission_require(team=team, user=actor, action="team.delete")
    if team.deployments.exists():  # running services are stopped on purpose, one by one, not by this
        raise Conflict("delete the team's deployments first")
    prefixes = list(ApiKey.objects.filter(team=team).values_list("prefix", flat=True))
    with transaction.atomic():
        name, team_id = team.name, team.pk
        team.delete()
        # The team's own events go with it; this one stays, outside any team.
        audit_record(team=None, actor=actor, action="team.delete", target=name, before={"id": team_id})
    for prefix in prefixes:  # the rows are gone: tombstone their cache entries so no process accepts them
        keycache.cache_revoke(prefix)


def _member_locked(team: Team, username: str) -> Membership:
    membership = (
        Membership.objects.select_for_update()
        .select_related("user")
        .filter(team=team, user__username=username)
        .first()
    )
    if membership is None:
        raise NotFound("member not found")
    return membership


def _keep_an_owner(team: Team, leaving: Membership) -> None:
    owners = list(Membership.objects.select_for_update().filter(team=team, role=Role.OWNER))
    if [m.pk for m in owners] == [leaving.pk]:
        raise Conflict("a team keeps at least one owner: make someone else owner first")


def _revoke_keys(*, team: Team, actor, user, scope: str | None = None) -> list[str]:
    keys = ApiKey.objects.filter(team=team, created_by=user, revoked_at__isnull=True)
    revoked = []
    for key in keys:
        if scope is None or scope in key.scopes:
            api_key_revoke(team=team, actor=actor, key_id=key.pk)
            revoked.append(key.prefix)
    return revoked


def member_role_change(*, team: Team, actor, username: str, role: str) -> Membership:
    """Change a member's role. Demoting to viewer revokes their `manage` keys for this team."""
    permission_require(team=team, user=actor, action="member.role_change")
    _check_role(role)
    with transaction.atomic():
        membership = _member_locked(team, username)
        before = membership.role
        if Role.OWNER in (before, role):
            permission_require(team=team, user=actor, action="owner.manage")
        if before == Role.OWNER and role != Role.OWNER:
            _keep_an_owner(team, membership)
        membership.role = role
        membership.save(update_fields=["role"])
        revoked: list[str] = []
        if ROLE_RANK[role] < ROLE_RANK[Role.MEMBER]:
            revoked = _revoke_keys(team=team, actor=actor, user=membership.user, scope=ApiKeyScope.MANAGE)
        audit_record(
            team=team,
            actor=actor,
            action="member.role_change",
            target=username,
            before={"role": before},
            after={"role": role},
            data={"keys_revoked": revoked},
        )
    return membership


def member_remove(*, team: Team, actor, username: str, reassign_keys: bool = False) -> None:
    """Remove a member. Their keys for this team are revoked, or reassigned to `actor`."""
    permission_require(team=team, user=actor, action="member.remove")
    with transaction.atomic():
        membership = _member_locked(team, username)
        if membership.role == Role.OWNER:
            permission_require(team=team, user=actor, action="owner.manage")
            _keep_an_owner(team, membership)
        user, revoked, reassigned = membership.user, [], []
        if reassign_keys and user != actor:
            active = ApiKey.objects.filter(team=team, created_by=user, revoked_at__isnull=True)
            reassigned = list(active.values_list("prefix", flat=True))
            active.update(created_by=actor)
        else:
            revoked = _revoke_keys(team=team, actor=actor, user=user)
        membership.delete()
        audit_record(
            team=team,
            actor=actor,
            action="member.remove",
            target=username,
            before={"role": membership.role},
            after=None,
            data={"keys_revoked": revoked, "keys_reassigned": reassigned},
        )


def invitation_create(*, team: Team, actor, role: str, email: str = "") -> tuple[Invitation, str]:
    """A one-time link to join `team` as `role`; returns the invitation and its token (shown once)."""
    permission_require(team=team, user=actor, action="member.invite")
    _check_role(role)
    if role == Role.OWNER:
        permission_require(team=team, user=actor, action="owner.manage")
    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise ValidationFailed("email is not a valid address") from None
    token = secrets.token_urlsafe(32)
    expires_at = timezone.now() + timedelta(seconds=settings.INVITATION_TTL_S)
    with transaction.atomic():
        invitation = Invitation.objects.create(
            team=team,
            role=role,
            email=email,
            token_hash=invitation_token_hash(token),
            created_by=actor,
            expires_at=expires_at,
        )
        after = {"role": role, "email": email, "expires_at": expires_at.isoformat()}
        audit_record(
            team=team,
            actor=actor,
            action="invitation.create",
            target=f"invitation {invitation.pk}",
            after=after,
        )
    return invitation, token


def invitation_revoke(*, team: Team, actor, invitation_id: int) -> Invitation:
    permission_require(team=team, user=actor, action="invitation.revoke")
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().filter(team=team, pk=invitation_id).first()
        if invitation is None:
            raise NotFound("invitation not found")
        state = invitation.state_at(timezone.now())
        if state != "pending":
            raise Conflict(f"this invitation is already {state}")
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit_record(
            team=team,
            actor=actor,
            action="invitation.revoke",
            target=f"invitation {invitation.pk}",
            before={"state": state},
            after={"state": "revoked"},
        )
    return invitation


def _pending_locked(token: str) -> Invitation:
    invitation = (
        Invitation.objects.select_for_update()
        .select_related("team")
        .filter(token_hash=invitation_token_hash(token or ""))
        .first()
    )
    if invitation is None:
        raise NotFound("this invitation link is not valid")
    state = invitation.state_at(timezone.now())
    if state != "pending":
        raise Conflict(f"this invitation link has been {state}; ask for a new one")
    return invitation


@transaction.atomic
def invitation_accept(*, token: str, user) -> Membership:
    """The signed-in `user` joins the invitation's team with its role; the link is used up."""
    invitation = _pending_locked(token)
    if Membership.objects.filter(team=invitation.team, user=user).exists():
        raise Conflict(f"you are already a member of {invitation.team.name}")
    membership = Membership.objects.create(team=invitation.team, user=user, role=invitation.role)
    invitation.accepted_at, invitation.accepted_by = timezone.now(), user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit_record(
        team=invitation.team,
        actor=user,
        action="member.join",
        target=user.username,
        after={"role": invitation.role},
        data={"invitation": invitation.pk},
    )
    return membership


@transaction.atomic
def invitation_accept_new_user(*, token: str, username: str, password: str):
    """Create an account (its owner chooses the password) and join the invitation's team with it."""
    _pending_locked(token)  # refuse before creating anything
    username = (username or "").strip()
    if not USERNAME_RE.fullmatch(username):
        raise ValidationFailed("username may contain letters, digits and @.+-_ (max 150)")
    if User.objects.filter(username__iexact=username).exists():
        raise ValidationFailed("that username is taken; choose another")
    try:
        validate_password(password, User(username=username))
    except ValidationError as exc:
        raise ValidationFailed(" ".join(exc.messages)) from None
    user = User.objects.create_user(username=username, password=password)
    invitation_accept(token=token, user=user)
    return user


def user_password_changed(*, user) -> None:
    """Audit a password change in each of the user's teams (where their admins read the log)."""
    teams: list[Team | None] = [m.team for m in Membership.objects.select_related("team").filter(user=user)]
    for team in teams or [None]:
        audit_record(team=team, actor=user, action="user.password_change", target=user.username)
