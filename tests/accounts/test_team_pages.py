import pytest
from django.contrib.auth import authenticate
from django.test import Client

from accounts.models import ApiKey, AuditEvent, Invitation, Membership
from accounts.team_services import team_create

pytestmark = pytest.mark.django_db


def test_switching_team_changes_what_pages_and_api_act_for(owner, owner_client):
    labs = team_create(name="labs", owner=owner)
    assert owner_client.get("/api/v1/team/members").json()[0]["username"] == "olivia"
    assert b"acme (owner)" in owner_client.get("/accounts/team/").content
    assert owner_client.post("/accounts/team/switch", {"team": labs.pk}).status_code == 302
    page = owner_client.get("/accounts/team/")
    assert b"Team labs" in page.content and b'id="team-switch"' in page.content
    assert (
        owner_client.post("/api/v1/keys", {"name": "k"}, content_type="application/json").status_code == 201
    )

    assert ApiKey.objects.get(name="k").team == labs


def test_switching_to_a_team_one_is_not_in_is_refused(owner_client, outsider):
    globex = Membership.objects.get(user=outsider).team
    owner_client.post("/accounts/team/switch", {"team": globex.pk})
    assert b"Team acme" in owner_client.get("/accounts/team/").content


def test_team_page_invites_and_shows_the_link_once(owner_client):
    r = owner_client.post("/accounts/team/action", {"action": "invite", "role": "viewer"})
    assert r.status_code == 302
    first = owner_client.get("/accounts/team/")
    assert b"/accounts/invitations/" in first.content and Invitation.objects.count() == 1
    assert b"/accounts/invitations/" not in owner_client.get("/accounts/team/").content


def test_viewer_sees_members_but_no_forms_and_cannot_post(viewer):
    c = Client()
    c.force_login(viewer)
    page = c.get("/accounts/team/")
    assert page.status_code == 200 and b"invite-form" not in page.content
    c.post("/accounts/team/action", {"action": "role", "username": "olivia", "role": "viewer"})
    assert Membership.objects.get(user__username="olivia").role == "owner"


def test_password_change_is_audited_and_keeps_the_session(owner, owner_client):
    r = owner_client.post(
        "/accounts/password/",
        {
            "old_password": "pw-olivia-123456",
            "new_password1": "n3w-secret-pass!",
            "new_password2": "n3w-secret-pass!",
        },
    )
    assert r.status_code == 302
    assert authenticate(username="olivia", password="n3w-secret-pass!") is not None
    assert owner_client.get("/accounts/team/").status_code == 200
    event = AuditEvent.objects.get(action="user.password_change")
    assert event.actor == owner and "n3w" not in str(event.data)


def test_admin_site_is_off_by_default(owner_client):
    assert Client().get("/admin/").status_code == 404
