import pytest
from django.core.cache import cache
from django.test import Client

from accounts import keycache
from accounts.models import AuditEvent

pytestmark = pytest.mark.django_db


def _forget_failures() -> None:
    """Delete the throttle's counters only: ``cache.clear()`` is FLUSHDB, which would also wipe what
    tests in the other xdist worker keep in the same Redis."""
    client = keycache.client()
    stale = list(client.scan_iter(match=f"{cache.make_key('login-fail:')}*"))
    if stale:
        client.delete(*stale)


@pytest.fixture(autouse=True)
def _clean_counters(settings):
    settings.LOGIN_MAX_FAILURES, settings.LOGIN_WINDOW_S = 3, 600
    _forget_failures()
    yield
    _forget_failures()


def sign_in(username, password, address="192.0.2.10"):
    return Client().post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_failures_lock_the_username_even_for_the_right_password(owner):
    for _ in range(3):
        assert sign_in("olivia", "wrong").status_code == 200
    r = sign_in("olivia", "pw-olivia-123456", address="192.0.2.99")
    assert r.status_code == 429 and 0 < int(r["Retry-After"]) <= 600
    assert b"Too many failed sign-ins" in r.content
    assert AuditEvent.objects.filter(action="login.lockout", target="olivia").count() == 1


def test_failures_from_one_address_lock_that_address_for_every_username(owner, teammate):
    for name in ("a", "b", "c"):
        sign_in(name, "wrong", address="198.51.100.4")
    assert sign_in("tom", "pw-tom-123456", address="198.51.100.4").status_code == 429
    assert sign_in("tom", "pw-tom-123456", address="198.51.100.5").status_code == 302


def test_a_success_clears_the_username_counter(owner):
    sign_in("olivia", "wrong")
    sign_in("olivia", "wrong")
    assert sign_in("olivia", "pw-olivia-123456", address="192.0.2.11").status_code == 302
    sign_in("olivia", "wrong", address="192.0.2.12")
    assert sign_in("olivia", "pw-olivia-123456", address="192.0.2.13").status_code == 302
