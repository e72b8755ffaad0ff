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
        "/accounts/keys/", {"name": "open", "scopes": ["inference"], "rate_per_s": " ", "burst": ""}
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
                                              "expires_days": "30", "quota_requests": "1000", "quota_images": ""})  # fmt: skip
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
