"""The embedded PostgreSQL and Redis used by the quick start: start, use, stop, restart with data kept."""

import json

import psycopg
import pytest
import redis

from console import embedded


@pytest.fixture(autouse=True)
def _isolated_storage():
    """Overrides tests/conftest.py's autouse fixture of that name, which needs pytest-django's `settings`:
    these tests need no Django at all and also run with `-p no:django`."""


def _start(data_dir):
    urls = embedded.ensure_services(data_dir)
    assert urls["DATABASE_URL"].startswith("postgres://")
    assert urls["REDIS_URL"].startswith("redis://")
    return urls


def test_services_start_persist_and_restart(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    data_dir = tmp_path / "var"
    try:
        urls = _start(data_dir)
        with psycopg.connect(urls["DATABASE_URL"], autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.info.dbname == "lantau"
            conn.execute("CREATE TABLE kept (note text)")
            conn.execute("INSERT INTO kept VALUES ('first run')")
        client = redis.Redis.from_url(urls["REDIS_URL"])
        assert client.ping()
        client.set("lantau:test", "kept")
        client.close()
        embedded.stop_services()

        again = _start(data_dir)
        # Ports are remembered, so URLs handed to workers stay valid across restarts.
        assert again == urls
        with psycopg.connect(again["DATABASE_URL"]) as conn:
            assert conn.execute("SELECT note FROM kept").fetchall() == [("first run",)]
        client = redis.Redis.from_url(again["REDIS_URL"])
        assert client.get("lantau:test") == b"kept"
        client.close()
    finally:
        embedded.stop_services()
    state = json.loads((data_dir / "services.json").read_text())
    assert "owner_pid" not in state["postgres"]
    assert not (data_dir / "redis" / "redis.pid").exists()


def test_env_urls_start_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db.example:5432/x")
    monkeypatch.setenv("REDIS_URL", "redis://cache.example:6379/0")
    urls = embedded.ensure_services(tmp_path / "unused")
    assert urls == {
        "DATABASE_URL": "postgres://u@db.example:5432/x",
        "REDIS_URL": "redis://cache.example:6379/0",
    }
    assert not (tmp_path / "unused").exists()
