"""Review L-J: `/v1/` and the heartbeat are served before Django, so they skipped ALLOWED_HOSTS and,
with LANTAU_HTTPS=1, the redirect to HTTPS: a bearer key could be sent over plain HTTP and answered.
Now both paths get Django's host check (400) and, where the console redirects to HTTPS, plain HTTP is
refused (403) instead of served."""

from __future__ import annotations

import json

import pytest

from console.asgi import http_app
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)


async def call(
    path: str, host: str, *, scheme: str = "http", extra: tuple = (), method: str = "GET"
) -> tuple[int, dict]:
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "scheme": scheme, "headers": [(b"host", host.encode()), (b"authorization", b"Bearer lt_00000000_"
             + b"a" * 43), *extra], "client": ("127.0.0.1", 5000)}  # fmt: skip
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await http_app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(body) if body else {}


@pytest.mark.parametrize("path,method", [("/v1/models", "GET"), ("/api/v1/nodes/heartbeat", "POST")])
def test_l_j_a_host_outside_allowed_hosts_is_refused(path, method) -> None:
    seen = {}

    async def scenario() -> None:
        seen["evil"] = await call(path, "evil.example", method=method)
        seen["ours"] = await call(path, "127.0.0.1", method=method)

    run(scenario)
    status, body = seen["evil"]
    assert status == 400 and "ALLOWED_HOSTS" in body["error"]["message"]
    assert seen["ours"][0] == 401  # a served host reaches the key check


def test_l_j_plain_http_is_refused_where_the_console_redirects_to_https(settings) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    seen = {}

    async def scenario() -> None:
        seen["plain"] = await call("/v1/models", "127.0.0.1")
        seen["proxied"] = await call("/v1/models", "127.0.0.1", extra=((b"x-forwarded-proto", b"https"),))
        seen["tls"] = await call("/v1/models", "127.0.0.1", scheme="https")

    run(scenario)
    status, body = seen["plain"]
    assert status == 403 and "HTTPS only" in body["error"]["message"]
    assert seen["proxied"][0] == 401 and seen["tls"][0] == 401
