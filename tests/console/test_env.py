import pytest

from core.env import ConfigError, env_bool, env_int, env_list, parse_database_url


def test_env_bool_accepts_common_spellings_and_refuses_others(monkeypatch):
    for raw, want in [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False), ("", False)]:
        monkeypatch.setenv("X_FLAG", raw)
        assert env_bool("X_FLAG") is want
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ConfigError, match="X_FLAG='maybe' is not a boolean"):
        env_bool("X_FLAG")


def test_env_int_enforces_type_and_bounds(monkeypatch):
    monkeypatch.delenv("X_NUM", raising=False)
    assert env_int("X_NUM", 7) == 7
    monkeypatch.setenv("X_NUM", "12")
    assert env_int("X_NUM", 7, minimum=1) == 12
    monkeypatch.setenv("X_NUM", "twelve")
    with pytest.raises(ConfigError, match="not an integer"):
        env_int("X_NUM", 7)
    monkeypatch.setenv("X_NUM", "0")
    with pytest.raises(ConfigError, match="below the minimum 1"):
        env_int("X_NUM", 7, minimum=1)


def test_env_list_splits_on_commas(monkeypatch):
    monkeypatch.setenv("X_HOSTS", "a.example, b.example,,")
    assert env_list("X_HOSTS", []) == ["a.example", "b.example"]


def test_database_url_is_parsed_and_non_postgres_refused():
    db = parse_database_url("postgres://u:p%40ss@db.internal:6543/lantau")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "u",
        "p@ss",
        "db.internal",
        "6543",
        "lantau",
    )
    with pytest.raises(ConfigError, match="postgres://"):
        parse_database_url("mysql://u@h/db")
    with pytest.raises(ConfigError, match="names no database"):
        parse_database_url("postgres://u@h:5432/")


def test_settings_refuse_to_start_without_secret_key_outside_debug(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "LANTAU_DEBUG")}
    env["DJANGO_SETTINGS_MODULE"] = "console.settings"
    env["LANTAU_DATA_DIR"] = str(tmp_path)
    code = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "SECRET_KEY is not set" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "secret_key").write_text("from-the-quick-start-file\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "from-the-quick-start-file"
