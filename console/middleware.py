"""Response hardening and request context for the console's Django views.

`ContentSecurityPolicyMiddleware` adds a Content-Security-Policy to every response that lacks one:
scripts only from this origin (the console's pages load their JS from static files, no inline
scripts), styles from this origin plus inline style attributes (Plotly draws its charts with them),
connections to this origin (the API and the `/ws/` websockets), no framing, no plugins, forms
posting only here.

`RequestAddressMiddleware` keeps the caller's address (see `accounts.addresses`) for the request, so
audit events written by services record where a change came from.
"""

from __future__ import annotations

from django.conf import settings

from accounts.addresses import client_address, current_address

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "object-src 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.CSP_ENABLED and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = CSP
        return response


class RequestAddressMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = current_address.set(client_address(request.META))
        try:
            return self.get_response(request)
        finally:
            current_address.reset(token)
