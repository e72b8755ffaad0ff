"""The API key page's form: malformed rate limits are refused with a message and create no key."""

import pytest

from accounts.models import ApiKey

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"rate_per_s": "fast"}, "rate_per_s must be a number, got 'fast'"),
        ({"rate_per_s": "nan"}, "rate_per_s must be a number, got 'nan'"),
        ({"rate_per_s": "5", "burst": "1.5"}, "burst must be a whole number, got '1.5'"),
        ({"rate_per_s": "5", "burst": "ten"}, "burst must be a whole number, got 'ten'"),
    ],
)
def test_key_form_refuses_a_malformed_rate_limit_and_creates_no_key(owner_client, fields, message):
    r = owner_client.post("/accounts/keys/", {"name": "limited", "scopes": ["inference"], **fields})
    assert r.status_code == 200 and [str(m) for m in r.context["messages"]] == [message]
    assert b"will not be shown again" not in r.content
    assert not ApiKey.objects.exists()


def test_key_form_blank_rate_limit_means_unlimited(owner_client, team):
    r = owner_client.post(
        "/accounts/keys/",
        {"name": "open", "scopes": ["inference"], "rate_per_s": " ", "burst": ""},
        follow=True,
    )
    assert r.status_code == 200 and b"will not be shown again" in r.content
    key = ApiKey.objects.get(team=team)
    assert key.rate_per_s is None and key.burst is None


def test_key_form_takes_a_well_formed_rate_limit(owner_client, team):
    owner_client.post(
        "/accounts/keys/", {"name": "limited", "scopes": ["inference"], "rate_per_s": "2.5", "burst": "5"}
    )
    key = ApiKey.objects.get(team=team)
    assert (key.rate_per_s, key.burst) == (2.5, 5)


def test_key_form_sets_quotas_deployments_and_expiry_and_the_page_is_not_cached(owner_client, team):
    r = owner_client.post("/accounts/keys/", {"name": "limited", "deployments": "colours, text-a",
                                              "expires_days": "30", "quota_requests": "1000", "quota_images": ""},
                          follow=True)  # fmt: skip
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"  # it holds the clear key
    key = ApiKey.objects.get(team=team)
    assert (
        key.deployments == ["colours", "text-a"] and key.quota_requests == 1000 and key.quota_images is None
    )
    assert key.expires_at is not None
    page = owner_client.get("/accounts/keys/")
    assert "no-store" not in page.get("Cache-Control", "")
    assert b"1000 requests/month" in page.content and b"only colours, text-a" in page.content
    assert b'id="key-usage"' in page.content  # the per-key chart data


@pytest.mark.parametrize(
    "fields, message",
    [({"quota_requests": "lots"}, "quota_requests"), ({"expires_days": "0"}, "expires_days"),
     ({"deployments": "Not A Name"}, "deployments")],
)  # fmt: skip
def test_key_form_refuses_bad_limits_and_creates_no_key(owner_client, fields, message):
    page = owner_client.post("/accounts/keys/", {"name": "k", **fields}, follow=True).content.decode()
    assert message in page and not ApiKey.objects.exists()


def test_creating_a_key_shows_it_in_the_answer_and_a_reload_makes_no_second_key(owner_client, team):
    """The create is answered with the page holding the clear key, not cached (review L-F: no redirect
    through the session); a reload posts the same one-time nonce again and makes no second key."""
    import re

    form = owner_client.get("/accounts/keys/").content.decode()
    nonce = re.search(r'name="form_nonce" value="([^"]+)"', form).group(1)
    body = {"name": "once", "scopes": ["inference"], "form_nonce": nonce}
    shown = owner_client.post("/accounts/keys/", body)
    assert shown.status_code == 200 and b"will not be shown again" in shown.content
    assert shown["Cache-Control"] == "no-store" and shown["Pragma"] == "no-cache"
    assert b'id="copy-key"' in shown.content
    reload = owner_client.post("/accounts/keys/", body)  # what a reload of the shown page does, once asked
    assert reload.status_code == 409 and b"will not be shown again" not in reload.content
    assert b"This form was already submitted; the key was shown once" in reload.content
    assert b"will not be shown again" not in owner_client.get("/accounts/keys/").content
    assert ApiKey.objects.filter(team=team).count() == 1


def test_key_form_keeps_the_typed_values_after_an_error(owner_client):
    r = owner_client.post("/accounts/keys/", {"name": "kept name", "rate_per_s": "fast", "deployments": "a, b",
                                              "scopes": ["manage"]})  # fmt: skip
    page = r.content.decode()
    assert r.status_code == 200 and 'value="kept name"' in page and 'value="a, b"' in page
    assert 'value="manage" checked' in page and 'value="inference" checked' not in page


def test_revoked_keys_are_behind_a_filter_and_counts_are_pluralised(owner_client, team):
    owner_client.post("/accounts/keys/", {"name": "live one", "scopes": ["inference"]})
    owner_client.post("/accounts/keys/", {"name": "old one", "scopes": ["inference"]})
    old = ApiKey.objects.get(team=team, name="old one")
    owner_client.post(f"/accounts/keys/{old.pk}/revoke")
    page = owner_client.get("/accounts/keys/").content.decode()
    assert "live one" in page and "old one" not in page and "show 1 revoked key<" in page
    assert "0 requests" in page and 'data-confirm="Revoke live one' in page
    every = owner_client.get("/accounts/keys/?revoked=1").content.decode()
    assert "live one" in every and "old one" in every


def test_last_used_comes_from_the_roll_up_or_the_runners_note(owner_client, team):
    """A used key's last use shows: from the usage table's rolled-up hours, and from Redis before the roll-up."""
    from datetime import UTC, datetime

    from accounts import keycache
    from accounts.models import ApiKeyUsage

    owner_client.post("/accounts/keys/", {"name": "rolled", "scopes": ["inference"]})
    owner_client.post("/accounts/keys/", {"name": "noted", "scopes": ["inference"]})
    rolled, noted = ApiKey.objects.get(name="rolled"), ApiKey.objects.get(name="noted")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    ApiKeyUsage.objects.create(api_key=rolled, hour=hour, requests=1)
    at = datetime(2026, 11, 4, 9, 30, tzinfo=UTC).timestamp()
    keycache.client().hset(
        keycache.names().last_use(noted.pk), mapping={"at": f"{at:.3f}", "addr": "192.0.2.7"}
    )
    try:
        page = owner_client.get("/accounts/keys/").content.decode()
    finally:
        keycache.client().delete(keycache.names().last_use(noted.pk))
    assert hour.strftime("%Y-%m-%d") in page and "2026-11-04" in page and "from 192.0.2.7" in page
    assert "never" not in page.split('id="keys"')[1]
    assert "1 request<" in page and "1 requests" not in page
