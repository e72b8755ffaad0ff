"""Template context for every page: the current membership and team, and the teams to switch to."""

from accounts.current import membership_for_request
from accounts.permissions import membership_allows
from accounts.selectors import memberships_of


def current_team(request):
    membership = membership_for_request(request)
    return {
        "membership": membership,
        "team": membership.team if membership else None,
        "my_memberships": memberships_of(user=getattr(request, "user", None)),
        "can_manage_team": membership_allows(membership, "member.invite"),
        "can_read_audit": membership_allows(membership, "audit.read"),
    }
