from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import Invitation, Membership
from accounts.team_services import invitation_create

pytestmark = pytest.mark.django_db


def link(token):
    return f"/accounts/invitations/{token}/"


def test_signed_in_person_joins_with_the_link_once(owner, team, outsider):
    invitation, token = invitation_create(team=team, actor=owner, role="member")
    assert Invitation.objects.get(pk=invitation.pk).token_hash != token  # only the hash is stored
    c = Client()
    c.force_login(outsider)
    page = c.get(link(token))
    assert page.status_code == 200 and b"Join acme" in page.content
    assert c.post(link(token)).status_code == 302
    assert Membership.objects.get(team=team, user=outsider).role == "member"
    used = c.get(link(token))
    assert used.status_code == 410 and b"has been accepted" in used.content
    assert Client().post(link(token), {"username": "late", "password": "a-long-pass-9281"}).status_code == 410


def test_expired_revoked_and_unknown_links_answer_a_clear_page(owner, team):
    expired, token = invitation_create(team=team, actor=owner, role="viewer")
    Invitation.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    r = Client().get(link(token))
    assert r.status_code == 410 and b"has been expired" in r.content
    _, revoked = invitation_create(team=team, actor=owner, role="viewer")
    c = Client()
    c.force_login(owner)
    rid = Invitation.objects.get(expires_at__gt=timezone.now()).pk
    assert c.delete(f"/api/v1/team/invitations/{rid}").json()["state"] == "revoked"
    assert b"has been revoked" in Client().get(link(revoked)).content
    r = Client().get(link("no-such-token"))
    assert r.status_code == 404 and b"not valid" in r.content


def test_new_account_needs_a_free_username_and_a_good_password(owner, team, teammate):
    _, token = invitation_create(team=team, actor=owner, role="viewer")
    r = Client().post(link(token), {"username": "tom", "password": "a-long-pass-9281"})
    assert b"username is taken" in r.content
    r = Client().post(link(token), {"username": "nina", "password": "123"})
    assert b"too short" in r.content
    assert not Membership.objects.filter(user__username="nina").exists()


def test_invitations_expire_after_the_configured_time(owner, team, settings):
    settings.INVITATION_TTL_S = 3600
    invitation, _ = invitation_create(team=team, actor=owner, role="viewer")
    delta = invitation.expires_at - timezone.now()
    assert timedelta(minutes=59) < delta <= timedelta(hours=1)
