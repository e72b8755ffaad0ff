"""Another site cannot act for a signed-in person: forms and session API calls need the CSRF token,
and websockets opened from another origin are closed before any membership is looked at."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.models import Invitation
from console.asgi import application


def signed_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_cross_site_form_post_is_refused(owner):
    client = signed_in(owner)
    r = client.post(
        "/accounts/team/action", {"action": "invite", "role": "owner"}, HTTP_ORIGIN="https://evil.example"
    )
    assert r.status_code == 403
    assert not Invitation.objects.exists()


@pytest.mark.django_db
def test_cross_site_api_call_with_the_session_cookie_is_refused(owner):
    client = signed_in(owner)
    r = client.post("/api/v1/team/invitations", {"role": "owner"}, content_type="application/json")
    assert r.status_code == 403
    assert not Invitation.objects.exists()


def _connect(path: str, origin: bytes, cookie: str) -> tuple[bool, int | None]:
    async def go():
        headers = [(b"origin", origin), (b"host", b"localhost"), (b"cookie", cookie.encode())]
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        await communicator.disconnect()
        return connected, code

    return asyncio.run(go())


@pytest.mark.django_db(transaction=True)
def test_cross_origin_websocket_is_closed_and_same_origin_accepted(owner):
    client = Client()
    client.force_login(owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    assert _connect("/ws/jobs/", b"https://evil.example", cookie)[0] is False
    assert _connect("/ws/jobs/", b"http://localhost", cookie)[0] is True


@pytest.mark.django_db(transaction=True)
def test_websocket_for_a_team_one_is_not_in_is_closed(owner, outsider):
    client = Client()
    client.force_login(outsider)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    acme = owner.memberships.get().team
    connected, code = _connect(f"/ws/jobs/?team={acme.pk}", b"http://localhost", cookie)
    assert connected is False and code == 4401
