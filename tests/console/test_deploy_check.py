"""Production-like settings pass Django's deployment checks with no warning, and LANTAU_HTTPS=1
turns on secure cookies, the proxy TLS header, HSTS and the redirect to HTTPS."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("LANTAU_") and k != "DJANGO_SETTINGS_MODULE"
    }
    clean.update(DJANGO_SETTINGS_MODULE="console.settings", **env)
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


PRODUCTION = {
    "LANTAU_HTTPS": "1",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "console.example.com",
    "LANTAU_DEBUG": "0",
}


def test_check_deploy_prints_no_warnings_with_production_settings():
    r = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNINGS" not in r.stdout + r.stderr and "no issues" in r.stdout


def test_check_deploy_warns_without_https():
    r = run(["manage.py", "check", "--deploy"], **{**PRODUCTION, "LANTAU_HTTPS": "0"})
    assert "security.W012" in r.stdout + r.stderr  # the session cookie is not marked Secure


def test_https_switch_sets_the_hardening_settings():
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER, "
        "s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT)"
    )
    on = run(["-c", code], **PRODUCTION).stdout.strip()
    assert on == "True True ('HTTP_X_FORWARDED_PROTO', 'https') 31536000 True"
    off = run(["-c", code], **{**PRODUCTION, "LANTAU_HTTPS": "0"}).stdout.strip()
    assert off == "False False None 0 False"
