"""Websocket routes (Channels)."""

from django.urls import path

from inference.consumers import (
    DeploymentMetricsConsumer,
    DeploymentStatusConsumer,
    JobUpdatesConsumer,
    NodeStatsConsumer,
    OverviewConsumer,
)

websocket_urlpatterns = [
    path("ws/deployments/", DeploymentStatusConsumer.as_asgi()),
    path("ws/jobs/", JobUpdatesConsumer.as_asgi()),
    path("ws/overview/", OverviewConsumer.as_asgi()),
    path("ws/nodes/<slug:name>/stats/", NodeStatsConsumer.as_asgi()),
    path("ws/deployments/<slug:name>/metrics/", DeploymentMetricsConsumer.as_asgi()),
]
