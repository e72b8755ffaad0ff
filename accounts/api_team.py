"""Team members: list (any member), add or change role (owners)."""

from ninja import Router, Status

from accounts import selectors, services
from accounts.schemas import MemberCreatedOut, MemberIn, MemberOut

router = Router(tags=["team"])


@router.get("/members", response=list[MemberOut])
def member_list(request):
    return list(selectors.team_members(team=request.auth.team))


@router.post("/members", response={201: MemberCreatedOut})
def member_invite(request, payload: MemberIn):
    membership, password = services.member_invite(
        team=request.auth.team, actor=request.auth.user, username=payload.username, role=payload.role
    )
    return Status(
        201,
        {
            "username": membership.user.username,
            "role": membership.role,
            "created_at": membership.created_at,
            "password": password,
        },
    )
