"""Teams, members and invitations: list, invite by one-time link, change roles, remove, delete the team."""

from django.urls import reverse
from ninja import Router, Status

from accounts import selectors, team_services
from accounts.permissions import permission_require
from accounts.schemas import (
    InvitationCreatedOut,
    InvitationIn,
    InvitationOut,
    MemberOut,
    RoleIn,
    TeamIn,
    TeamOut,
)

router = Router(tags=["team"])
teams_router = Router(tags=["team"])


@router.get("/members", response=list[MemberOut])
def member_list(request):
    return list(selectors.team_members(team=request.auth.team))


@router.patch("/members/{username}", response=MemberOut)
def member_role_change(request, username: str, payload: RoleIn):
    return team_services.member_role_change(
        team=request.auth.team, actor=request.auth.user, username=username, role=payload.role
    )


@router.delete("/members/{username}", response={204: None})
def member_remove(request, username: str, reassign_keys: bool = False):
    team_services.member_remove(
        team=request.auth.team, actor=request.auth.user, username=username, reassign_keys=reassign_keys
    )
    return Status(204, None)


@router.get("/invitations", response=list[InvitationOut])
def invitation_list(request):
    permission_require(team=request.auth.team, user=request.auth.user, action="invitation.read")
    return list(selectors.invitations_for_team(team=request.auth.team))


@router.post("/invitations", response={201: InvitationCreatedOut})
def invitation_create(request, payload: InvitationIn):
    invitation, token = team_services.invitation_create(
        team=request.auth.team, actor=request.auth.user, role=payload.role, email=payload.email
    )
    url = request.build_absolute_uri(reverse("accounts:invitation", args=[token]))
    invitation.url = url  # type: ignore[attr-defined]  # for this answer only, never stored
    return Status(201, invitation)


@router.delete("/invitations/{invitation_id}", response=InvitationOut)
def invitation_revoke(request, invitation_id: int):
    return team_services.invitation_revoke(
        team=request.auth.team, actor=request.auth.user, invitation_id=invitation_id
    )


@router.delete("", response={204: None})
def team_delete(request):
    team_services.team_delete(team=request.auth.team, actor=request.auth.user)
    return Status(204, None)


@teams_router.get("", response=list[TeamOut])
def team_list(request):
    return selectors.memberships_of(user=request.auth.user)


@teams_router.post("", response={201: TeamOut})
def team_create(request, payload: TeamIn):
    team = team_services.team_create(name=payload.name, owner=request.auth.user)
    return Status(201, selectors.membership_for(user=request.auth.user, team_id=team.pk))
