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

from core.errors import PayloadTooLarge  # noqa: E402
from inference.api import heartbeat  # noqa: E402
from inference.gateway.app import gateway_app  # noqa: E402
from inference.gateway.http import header, send_error  # noqa: E402
from inference.routing import websocket_urlpatterns  # noqa: E402


async def http_app(scope, receive, send):
    path = scope["path"]
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
