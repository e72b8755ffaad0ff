import pytest
from django.contrib.auth import authenticate
from django.test import Client

from accounts.models import ApiKey, AuditEvent, Membership
from accounts.services import api_key_create
from tests.support import people

pytestmark = pytest.mark.django_db


def json_call(client, method, path, body=None):
    return getattr(client, method)(path, body or {}, content_type="application/json")


def test_the_old_owner_sets_a_password_path_is_gone(owner_client):
    r = json_call(owner_client, "post", "/api/v1/team/members", {"username": "newbie"})
    assert r.status_code == 405
    assert authenticate(username="newbie", password="") is None


def test_owner_invites_by_link_and_the_invitee_chooses_the_password(owner_client, team):
    r = json_call(owner_client, "post", "/api/v1/team/invitations", {"role": "viewer", "email": "n@x.io"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["state"] == "pending" and body["role"] == "viewer" and "password" not in body
    token = body["url"].rstrip("/").rsplit("/", 1)[1]
    r = Client().post(
        f"/accounts/invitations/{token}/", {"username": "newbie", "password": "a-long-pass-9281"}
    )
    assert r.status_code == 302
    assert authenticate(username="newbie", password="a-long-pass-9281") is not None
    assert Membership.objects.get(user__username="newbie").team == team
    names = [m["username"] for m in owner_client.get("/api/v1/team/members").json()]
    assert names == ["newbie", "olivia"]
    listed = owner_client.get("/api/v1/team/invitations").json()
    assert [i["state"] for i in listed] == ["accepted"] and "url" not in listed[0]


def test_members_cannot_invite_and_bad_roles_are_refused(teammate, owner_client):
    c = Client()
    c.force_login(teammate)
    assert json_call(c, "post", "/api/v1/team/invitations", {"role": "member"}).status_code == 403
    r = json_call(owner_client, "post", "/api/v1/team/invitations", {"role": "god"})
    assert r.status_code == 422 and "role" in r.json()["error"]["message"]
    r = json_call(owner_client, "post", "/api/v1/team/invitations", {"email": "not an address"})
    assert r.status_code == 422


def test_admin_manages_members_but_not_owners(owner, team):
    admin = people.person("ada", "acme", "admin")
    c = Client()
    c.force_login(admin)
    people.person("sam", "acme", "member")
    r = json_call(c, "patch", "/api/v1/team/members/sam", {"role": "viewer"})
    assert r.status_code == 200 and r.json()["role"] == "viewer"
    assert json_call(c, "patch", "/api/v1/team/members/sam", {"role": "owner"}).status_code == 403
    assert json_call(c, "patch", "/api/v1/team/members/olivia", {"role": "viewer"}).status_code == 403
    assert c.delete("/api/v1/team/members/olivia").status_code == 403
    assert json_call(c, "post", "/api/v1/team/invitations", {"role": "owner"}).status_code == 403
    event = AuditEvent.objects.get(action="member.role_change", target="sam")
    assert event.before == {"role": "member"} and event.after == {"role": "viewer"} and event.actor == admin


def test_a_team_keeps_one_owner(owner_client, owner):
    r = json_call(owner_client, "patch", "/api/v1/team/members/olivia", {"role": "admin"})
    assert r.status_code == 409 and "owner" in r.json()["error"]["message"]
    assert owner_client.delete("/api/v1/team/members/olivia").status_code == 409


def test_removing_a_member_revokes_their_keys(owner_client, teammate, team):
    key, _ = api_key_create(team=team, actor=teammate, name="tom's", scopes=["inference"])
    assert owner_client.delete("/api/v1/team/members/tom").status_code == 204
    assert not Membership.objects.filter(user=teammate).exists()
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    event = AuditEvent.objects.get(action="member.remove", target="tom")
    assert event.before == {"role": "member"} and event.data["keys_revoked"] == [key.prefix]


def test_removing_with_reassign_keeps_keys_under_the_remover(owner_client, owner, teammate, team):
    key, _ = api_key_create(team=team, actor=teammate, name="tom's", scopes=["inference"])
    assert owner_client.delete("/api/v1/team/members/tom?reassign_keys=true").status_code == 204
    key.refresh_from_db()
    assert key.revoked_at is None and key.created_by == owner


def test_demoting_to_viewer_revokes_manage_keys_only(owner_client, teammate, team):
    manage, _ = api_key_create(team=team, actor=teammate, name="m", scopes=["manage"])
    infer, _ = api_key_create(team=team, actor=teammate, name="i", scopes=["inference"])
    assert json_call(owner_client, "patch", "/api/v1/team/members/tom", {"role": "viewer"}).status_code == 200
    assert ApiKey.objects.get(pk=manage.pk).revoked_at is not None
    assert ApiKey.objects.get(pk=infer.pk).revoked_at is None


def test_teams_are_created_listed_and_deleted(owner_client, owner):
    r = json_call(owner_client, "post", "/api/v1/teams", {"name": "labs"})
    assert r.status_code == 201 and r.json()["role"] == "owner"
    labs = r.json()["id"]
    assert json_call(owner_client, "post", "/api/v1/teams", {"name": "LABS"}).status_code == 409
    assert sorted(t["name"] for t in owner_client.get("/api/v1/teams").json()) == ["acme", "labs"]
    r = owner_client.delete("/api/v1/team", HTTP_X_LANTAU_TEAM=str(labs))
    assert r.status_code == 204
    assert [t["name"] for t in owner_client.get("/api/v1/teams").json()] == ["acme"]
    assert AuditEvent.objects.filter(action="team.delete", target="labs", team=None).exists()
