"""Review finding L-F: a new API key and a join token used to wait in clear in the session (DB backend,
signed but not encrypted) from the creating POST until the next page view, so a database dump showed them.

Now the creating POST is answered with the page that shows the secret once (``Cache-Control: no-store``,
``Pragma: no-cache``), and the session keeps only hashes of one-time form nonces (``core.once``): a
replayed POST (a reload, a double submit) with the same nonce creates nothing and says so.
"""

from __future__ import annotations

import html
import re

import pytest
from django.apps import apps
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session

from accounts.models import ApiKey
from inference.credentials import token_hash
from inference.models import JoinToken

pytestmark = pytest.mark.django_db

KEY_RE = re.compile(r"lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")
TOKEN_RE = re.compile(r"ltj_[A-Za-z0-9_-]{43}")
NONCE_RE = re.compile(r'name="form_nonce" value="([^"]+)"')


def nonce_of(page) -> str:
    found = NONCE_RE.search(page.content.decode())
    return found.group(1) if found else ""


def sessions_text() -> str:
    """Every row of django_session, decoded with the session backend: what a database dump would give."""
    rows = list(Session.objects.all())
    assert rows, "the signed-in client has a session row"
    return "\n".join(repr(SessionStore().decode(row.session_data)) + row.session_data for row in rows)


def database_text() -> str:
    """Every row of every table the project's models map (sessions decoded above)."""
    return "\n".join(repr(list(model.objects.values())) for model in apps.get_models())


def assert_nowhere_stored(clear: str) -> None:
    assert clear not in sessions_text(), "a clear secret is in django_session"
    assert clear not in database_text(), "a clear secret is in a database row"


def assert_not_cached(response) -> None:
    assert response["Cache-Control"] == "no-store" and response["Pragma"] == "no-cache"


def test_l_f_a_new_key_is_shown_by_the_post_answer_and_never_written_to_the_session(owner_client, team):
    form = owner_client.get("/accounts/keys/")
    r = owner_client.post(
        "/accounts/keys/", {"name": "dumped", "scopes": ["inference"], "form_nonce": nonce_of(form)}
    )
    every_session = sessions_text()
    assert not KEY_RE.search(every_session), "the new key waits in clear in django_session"
    assert r.status_code == 200 and b"will not be shown again" in r.content
    assert_not_cached(r)
    clear = KEY_RE.search(r.content.decode()).group(0)
    assert clear.startswith(ApiKey.objects.get(team=team).prefix + "_")
    assert_nowhere_stored(clear)
    after = owner_client.get("/accounts/keys/")  # the next page view has nothing left to show
    assert clear not in after.content.decode() and b"will not be shown again" not in after.content
    assert_nowhere_stored(clear)


def test_l_f_a_replayed_key_form_creates_nothing_and_says_the_key_was_shown_once(owner_client, team):
    nonce = nonce_of(owner_client.get("/accounts/keys/"))
    assert nonce, "the create form carries a one-time nonce"
    body = {"name": "once", "scopes": ["inference"], "form_nonce": nonce}
    first = owner_client.post("/accounts/keys/", body)
    assert first.status_code == 200 and KEY_RE.search(first.content.decode())
    again = owner_client.post("/accounts/keys/", body)  # a reload of the answer, or a double click
    page = again.content.decode()
    assert again.status_code == 409 and not KEY_RE.search(page)
    assert "This form was already submitted; the key was shown once" in page
    assert ApiKey.objects.filter(team=team).count() == 1
    assert nonce not in sessions_text()  # only its hash is remembered: a nonce is no secret, but still
    fresh = nonce_of(again)
    assert fresh and fresh != nonce  # the answer's form has a fresh nonce, which makes a new key
    second = owner_client.post("/accounts/keys/", {**body, "name": "two", "form_nonce": fresh})
    assert second.status_code == 200
    assert ApiKey.objects.filter(team=team).count() == 2


def test_l_f_a_refused_key_form_keeps_its_nonce_for_the_corrected_submit(owner_client, team):
    nonce = nonce_of(owner_client.get("/accounts/keys/"))
    bad = owner_client.post("/accounts/keys/", {"name": "k", "rate_per_s": "fast", "form_nonce": nonce})
    assert bad.status_code == 200 and not ApiKey.objects.exists()
    good = owner_client.post("/accounts/keys/", {"name": "k", "form_nonce": nonce})
    assert good.status_code == 200 and KEY_RE.search(good.content.decode())


def test_l_f_a_join_token_and_its_commands_are_shown_by_the_post_answer_only(install_admin, owner_client):
    nonce = nonce_of(owner_client.get("/nodes/"))
    body = {"region": "hk", "labels": "gpu=h200", "ttl_s": "600", "form_nonce": nonce}
    r = owner_client.post("/nodes/join-token", body)
    every_session = sessions_text()
    assert not TOKEN_RE.search(every_session), "the join token waits in clear in django_session"
    assert r.status_code == 200
    assert_not_cached(r)
    page = html.unescape(r.content.decode())
    clear = TOKEN_RE.search(page).group(0)
    assert JoinToken.objects.get().token_hash == token_hash(clear)
    assert 'id="join-docker"' in page and "LANTAU_JOIN_TOKEN=%s" in page and f"'{clear}'" in page
    assert "valid for 600 s" in page
    assert_nowhere_stored(clear)
    after = owner_client.get("/nodes/")
    assert clear not in after.content.decode() and 'id="join-token"' not in after.content.decode()
    # The same form again (a reload of the answer): no second token, and a message that says why.
    assert nonce, "the join-token form carries a one-time nonce"
    again = owner_client.post("/nodes/join-token", body, follow=True)
    assert JoinToken.objects.count() == 1 and not TOKEN_RE.search(again.content.decode())
    assert "This form was already submitted; the join token was shown once" in again.content.decode()
    assert_nowhere_stored(clear)


@pytest.mark.django_db(transaction=True)
def test_l_f_two_simultaneous_posts_of_one_key_form_make_one_key(owner_client, team):
    """A double click sends the same form twice at once: the nonce check is serialised, one key is made."""
    import threading

    from django.db import connection
    from django.test import Client

    nonce = nonce_of(owner_client.get("/accounts/keys/"))
    body = {"name": "double", "scopes": ["inference"], "form_nonce": nonce}
    start, statuses = threading.Barrier(2), []

    def submit() -> None:
        client = Client()
        client.cookies = owner_client.cookies  # the same browser, so the same session
        try:
            start.wait(timeout=10)
            statuses.append(client.post("/accounts/keys/", body).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [200, 409]
    assert ApiKey.objects.filter(team=team).count() == 1
