"""The inference gateway: `/v1/` on the console, forwarding to runner replicas (a plain ASGI app, no Django views)."""
