"""Websocket routes (Channels)."""

from django.urls import path

from inference.consumers import DeploymentMetricsConsumer, DeploymentStatusConsumer, JobUpdatesConsumer

websocket_urlpatterns = [
    path("ws/deployments/", DeploymentStatusConsumer.as_asgi()),
    path("ws/jobs/", JobUpdatesConsumer.as_asgi()),
    path("ws/deployments/<slug:name>/metrics/", DeploymentMetricsConsumer.as_asgi()),
]
