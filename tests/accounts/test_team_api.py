import pytest
from django.contrib.auth import authenticate
from django.test import Client

from accounts.models import AuditEvent, Membership

pytestmark = pytest.mark.django_db


def test_owner_adds_a_new_member_who_can_sign_in(owner_client, team):
    r = owner_client.post(
        "/api/v1/team/members", {"username": "newbie", "role": "viewer"}, content_type="application/json"
    )
    assert r.status_code == 201
    body = r.json()
    assert body["role"] == "viewer" and body["password"]
    assert authenticate(username="newbie", password=body["password"]) is not None
    assert Membership.objects.get(user__username="newbie").team == team
    assert AuditEvent.objects.filter(action="member.add", target="newbie").exists()
    names = [m["username"] for m in owner_client.get("/api/v1/team/members").json()]
    assert names == ["newbie", "olivia"]


def test_members_cannot_add_members_and_roles_are_checked(teammate, owner_client):
    c = Client()
    c.force_login(teammate)
    r = c.post("/api/v1/team/members", {"username": "sneaky"}, content_type="application/json")
    assert r.status_code == 403
    r = owner_client.post(
        "/api/v1/team/members", {"username": "x", "role": "god"}, content_type="application/json"
    )
    assert r.status_code == 422 and "role" in r.json()["error"]["message"]
    r = owner_client.post("/api/v1/team/members", {"username": "bad name!"}, content_type="application/json")
    assert r.status_code == 422


def test_existing_user_is_added_without_a_new_password(owner_client, outsider):
    r = owner_client.post(
        "/api/v1/team/members", {"username": "oscar", "role": "member"}, content_type="application/json"
    )
    assert r.status_code == 201 and r.json()["password"] is None
