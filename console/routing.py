"""Websocket routes (Channels)."""

from django.urls import path

from console.consumers import DeploymentStatusConsumer

websocket_urlpatterns = [
    path("ws/deployments/", DeploymentStatusConsumer.as_asgi()),
]
