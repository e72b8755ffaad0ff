"""Review L-E: anyone could lock any account (``admin`` included) out of sign-in with five anonymous POSTs.

Now a browser that has signed in as the user before carries a signed device cookie and is judged by its
own counter: a stranger's failures lock out unknown browsers only. The address limit still holds, a
device cookie of another user or a forged one counts for nothing, and failures from the known browser
still lock that browser.
"""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from accounts import keycache, login_throttle
from tests.accounts.test_login_throttle import _forget_failures

pytestmark = pytest.mark.django_db

PASSWORD = "pw-olivia-123456"


@pytest.fixture(autouse=True)
def _counters(settings):
    settings.LOGIN_MAX_FAILURES, settings.LOGIN_WINDOW_S = 3, 600
    _forget_failures()
    yield
    _forget_failures()


def sign_in(client: Client, password: str, address: str, username: str = "olivia"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def known_browser() -> Client:
    """Olivia's own browser after one successful sign-in (it holds her device cookie), signed out again."""
    browser = Client()
    assert sign_in(browser, PASSWORD, "192.0.2.10").status_code == 302
    assert login_throttle.DEVICE_COOKIE in browser.cookies
    browser.post("/accounts/logout/")
    return browser


def test_l_e_a_stranger_cannot_lock_the_owner_out_of_her_own_browser(owner) -> None:
    browser = known_browser()
    stranger = Client()
    for i in range(5):
        sign_in(stranger, "guess", f"198.51.100.{i}")  # many addresses, none of them hers
    assert sign_in(Client(), PASSWORD, "192.0.2.77").status_code == 429  # an unknown browser: locked
    r = sign_in(browser, PASSWORD, "192.0.2.10")
    assert r.status_code == 302  # her browser: in


def test_l_e_failures_from_the_known_browser_lock_that_browser(owner) -> None:
    browser = known_browser()
    for _ in range(3):
        assert sign_in(browser, "wrong", f"192.0.2.{20}").status_code == 200
    assert sign_in(browser, PASSWORD, "192.0.2.21").status_code == 429


def test_l_e_another_users_or_a_forged_device_cookie_counts_for_nothing(owner, teammate) -> None:
    tom = Client()
    assert sign_in(tom, "pw-tom-123456", "192.0.2.30", username="tom").status_code == 302
    tom.post("/accounts/logout/")
    for i in range(3):
        sign_in(Client(), "guess", f"198.51.100.{i}")  # olivia is locked for unknown browsers
    assert sign_in(tom, PASSWORD, "192.0.2.31").status_code == 429  # tom's cookie is not olivia's
    forged = Client()
    forged.cookies[login_throttle.DEVICE_COOKIE] = "eyJ1IjoieCIsImQiOiJ5In0:forged:signature"
    assert sign_in(forged, PASSWORD, "192.0.2.32").status_code == 429


def test_l_e_the_address_limit_still_holds_for_a_known_browser(owner) -> None:
    browser = known_browser()
    for name in ("a", "b", "c"):
        sign_in(Client(), "wrong", "203.0.113.5", username=name)
    assert sign_in(browser, PASSWORD, "203.0.113.5").status_code == 429


def test_l_e_a_planted_counter_is_data(owner) -> None:
    """A counter that is not a number (whoever can write Redis) neither locks nor breaks sign-in."""
    key = cache.make_key(f"login-fail:user:{login_throttle._name('olivia')}")
    keycache.client().set(key, b"not-a-number", ex=60)
    assert sign_in(Client(), "wrong", "192.0.2.40").status_code == 200
    assert sign_in(Client(), PASSWORD, "192.0.2.41").status_code == 302
