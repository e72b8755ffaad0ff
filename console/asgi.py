"""ASGI entry point: `/v1/` goes to the inference gateway, node heartbeats to their own pooled route
(`inference.api.heartbeat`), websockets to Channels, the rest to Django."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

from core.errors import ApplicationError, BadRequest, Forbidden, PayloadTooLarge  # noqa: E402
from inference.api import heartbeat  # noqa: E402
from inference.gateway.app import gateway_app  # noqa: E402
from inference.gateway.http import header, send_error  # noqa: E402
from inference.routing import websocket_urlpatterns  # noqa: E402


def outside_django_refusal(scope) -> ApplicationError | None:
    """What Django's middleware would refuse for the paths served before it (review L-J): a Host that is
    not in ALLOWED_HOSTS (400), and plain HTTP where the console redirects to HTTPS (403, not a
    redirect: the bearer key has already crossed in clear, and a client that follows redirects would send
    it again). HTTPS is told by the scheme, or by ``X-Forwarded-Proto: https`` from the proxy when
    ``LANTAU_HTTPS`` trusts it (SECURE_PROXY_SSL_HEADER)."""
    host = (header(scope, b"host") or "").strip()
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    if not domain or not validate_host(domain, allowed):
        return BadRequest(f"host {host[:100]!r} is not served here (ALLOWED_HOSTS)")
    if settings.SECURE_SSL_REDIRECT and not _secure(scope):
        return Forbidden("this console takes API calls over HTTPS only: call it with https:// (and treat a "
                         "key that was sent over plain HTTP as exposed)")  # fmt: skip
    return None


def _secure(scope) -> bool:
    if scope.get("scheme") in ("https", "wss"):
        return True
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        name = proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        return header(scope, name) == proxy[1]
    return False


async def http_app(scope, receive, send):
    path = scope["path"]
    before_django = path.startswith("/v1/") or path == "/v1" or heartbeat.handles(scope)
    if before_django and (refusal := outside_django_refusal(scope)) is not None:
        return await send_error(send, refusal)
    if path.startswith("/v1/") or path == "/v1":
        return await gateway_app(scope, receive, send)
    if heartbeat.handles(scope):  # node agents' heartbeats: a pooled path of their own, before Django
        return await heartbeat.app(scope, receive, send)
    declared = header(scope, b"content-length")
    # Refuse an oversized upload before daphne's body has to be spooled anywhere by Django.
    if declared and declared.isdigit() and int(declared) > settings.MAX_UPLOAD_BYTES + 1024 * 1024:
        return await send_error(
            send,
            PayloadTooLarge(f"request body is larger than the limit of {settings.MAX_UPLOAD_BYTES} bytes"),
        )
    return await django_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
