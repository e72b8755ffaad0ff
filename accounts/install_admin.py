"""Install administrators: the people who own the shared fleet (nodes, join tokens, edges, node pools
and what each team is granted of them, and the regions, ``inference.services.regions``), above every team.

Team roles (owner, admin, member, viewer; `accounts.permissions`) govern a team's own objects only, so
creating a team never hands anyone the fleet (review H-A). The flag is Django's ``User.is_staff``, set by
``manage.py install_admin`` or, on the team page, by another install administrator; the quick start's
``admin`` user is one. A deactivated user is no administrator.

Fleet actions are audited with ``audit_fleet``: once in the install's own log (``team=None``, read by
administrators) and once in each team involved (the actor's and every team whose replicas the action
touches), so a team sees who drained the node its deployment ran on (review L-I).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from accounts.models import AuditEvent, Membership, Team
from accounts.services import audit_record
from core.errors import Forbidden, ValidationFailed

NOT_ADMIN = (
    "this needs an install administrator (nodes, join tokens, edges, node pools and regions serve every team)"
)


def is_install_admin(user) -> bool:
    return bool(
        user is not None
        and getattr(user, "is_authenticated", False)
        and user.is_active
        and (user.is_staff or user.is_superuser)
    )


def install_admin_require(user) -> None:
    """Refuse (403) anyone who is not an install administrator, whatever their team roles."""
    if not is_install_admin(user):
        raise Forbidden(NOT_ADMIN)


def audit_fleet(*, actor, action: str, target: str, teams: Iterable[int] = (), data: dict | None = None,
                before: dict | None = None, after: dict | None = None) -> list[AuditEvent]:  # fmt: skip
    """One fleet action in the install log and in the log of the actor's teams and of ``teams`` (ids)."""
    involved = set(teams)
    if actor is not None and getattr(actor, "is_authenticated", False):
        involved |= set(Membership.objects.filter(user=actor).values_list("team_id", flat=True))
    events = [audit_record(team=None, actor=actor, action=action, target=target, data=data, before=before,
                           after=after)]  # fmt: skip
    for team in Team.objects.filter(pk__in=involved).order_by("pk"):
        events.append(audit_record(team=team, actor=actor, action=action, target=target, data=data,
                                   before=before, after=after))  # fmt: skip
    return events


def install_admin_set(*, actor, user, value: bool) -> None:
    """Make ``user`` an install administrator (or no longer one). ``actor`` None is the management
    command (someone with a shell on the console host); otherwise the actor must be one already, and
    nobody takes the flag from themselves (an install always keeps the administrator acting)."""
    if actor is not None:
        install_admin_require(actor)
        if actor.pk == user.pk and not value:
            raise ValidationFailed("you cannot take the install administrator flag from yourself")
    if not user.is_active and value:
        raise ValidationFailed(f"{user.get_username()} is deactivated")
    with transaction.atomic():
        before = bool(user.is_staff)
        type(user).objects.filter(pk=user.pk).update(is_staff=value)
        user.is_staff = value
        if before != value:
            audit_fleet(actor=actor, action="install.admin_grant" if value else "install.admin_revoke",
                        target=user.get_username(),
                        teams=Membership.objects.filter(user=user).values_list("team_id", flat=True),
                        before={"install_admin": before}, after={"install_admin": value})  # fmt: skip
