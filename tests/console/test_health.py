import pytest

from accounts import keycache


@pytest.mark.django_db
def test_healthz_and_readyz_answer_when_services_are_up(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_redis_is_unreachable(client, settings):
    from tests.support.ports import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    keycache.client.cache_clear()
    try:
        r = client.get("/readyz")
    finally:
        keycache.client.cache_clear()
    assert r.status_code == 503
    assert r.json() == {"status": "unavailable", "failing": ["redis"]}
