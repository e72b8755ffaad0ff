"""The permission matrix: which team roles may do which action. The one place that decides.

Services call `permission_require(team=..., user=..., action=...)` before they change anything; the
API, the pages and the websocket consumers reach the same services, so a template that shows a button
to the wrong person still cannot make the change happen. `docs/security.md` prints this matrix, and
`tests/security/test_permissions.py` checks every cell of it through the API.

Rules the matrix cannot express (an admin may not touch owners; a team keeps one owner; a member
revokes only their own keys) live in the services that apply them, next to the check.
"""

from __future__ import annotations

from accounts.models import Membership, Role, Team
from core.errors import Forbidden, NotFound

OWNER, ADMIN, MEMBER, VIEWER = Role.OWNER, Role.ADMIN, Role.MEMBER, Role.VIEWER
EVERYONE = frozenset({OWNER, ADMIN, MEMBER, VIEWER})
WRITERS = frozenset({OWNER, ADMIN, MEMBER})
MANAGERS = frozenset({OWNER, ADMIN})
OWNERS = frozenset({OWNER})

PERMISSIONS: dict[str, frozenset[str]] = {
    # the team itself
    "team.delete": OWNERS,
    # people
    "member.read": EVERYONE,
    "member.invite": MANAGERS,
    "member.role_change": MANAGERS,
    "member.remove": MANAGERS,
    "owner.manage": OWNERS,  # grant or take the owner role, remove an owner
    "invitation.read": MANAGERS,
    "invitation.revoke": MANAGERS,
    "audit.read": MANAGERS,
    # models, versions, jobs
    "model.read": EVERYONE,
    "model.upload": WRITERS,
    "model.delete": WRITERS,
    "job.read": EVERYONE,
    "job.start": WRITERS,
    "job.cancel": WRITERS,
    "job.retry": WRITERS,
    # validation datasets
    "dataset.read": EVERYONE,
    "dataset.create": WRITERS,
    "dataset.delete": WRITERS,
    # deployments
    "deployment.read": EVERYONE,
    "deployment.create": WRITERS,
    "deployment.update": WRITERS,
    "deployment.delete": WRITERS,
    # API keys
    "key.read": EVERYONE,
    "key.create": WRITERS,
    "key.update": WRITERS,  # name, deployments, limits, expiry
    "key.revoke": WRITERS,  # one's own keys
    "key.manage_others": MANAGERS,  # revoke or change the keys of others
    # nodes: every member sees the list (region, status, load); inventories are for staff only
    "node.read": EVERYONE,
    "node.manage": MANAGERS,  # join tokens, cordon, drain, remove, credential rotation
}

ROLE_RANK: dict[str, int] = {VIEWER: 0, MEMBER: 1, ADMIN: 2, OWNER: 3}


def role_allows(role: str, action: str) -> bool:
    """Whether `role` may do `action`. An action missing from the matrix is a programming error."""
    try:
        return role in PERMISSIONS[action]
    except KeyError:
        raise KeyError(f"action {action!r} is not in accounts.permissions.PERMISSIONS") from None


def membership_allows(membership: Membership | None, action: str) -> bool:
    return membership is not None and role_allows(membership.role, action)


def permission_require(*, team: Team, user, action: str) -> Membership:
    """The user's membership of `team` when its role allows `action`.

    Outsiders get 404 (the team's objects do not exist for them); members whose role is too low
    get 403 naming the action.
    """
    membership = None
    if user is not None and getattr(user, "is_authenticated", False):
        membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise NotFound("team not found")
    if not role_allows(membership.role, action):
        raise Forbidden(f"your role ({membership.role}) does not allow {action}")
    return membership


def matrix_rows() -> list[tuple[str, list[bool]]]:
    """The matrix as rows of (action, allowed per role in owner, admin, member, viewer order)."""
    roles = (OWNER, ADMIN, MEMBER, VIEWER)
    return [(action, [role in allowed for role in roles]) for action, allowed in PERMISSIONS.items()]
