"""The one door for a deployment change: every writer calls ``deployment_changed``, nothing else.

A change to a deployment or its replicas (created, scaled, paused, rolled over, a replica placed,
ready, failed or removed, a canary started or ended, autoscaling's bounds, the deployment deleted)
has three audiences, each told once the transaction commits, so none sees a change that is rolled
back:

- the team's open pages get the deployment's status (``inference.live``, over Channels);
- the edges get its route, or its removal (``inference.routes_publish``, a signed entry in Redis);
- the reconciler gets a pass when the change needs one (``reconcile=True``: the desired state moved).

The API's services, the reconciler, rollouts and canaries, autoscaling and heartbeats call it; the
two adapters import no service, so this module is where the arrows meet. The periodic route rewrite
(``routes_publish_all``) and reconcile pass repair anything a Redis or broker outage lost.
"""

from __future__ import annotations

from inference import queue
from inference.live import publish_deployment_status
from inference.models import Deployment
from inference.routes_publish import routes_publish


def deployment_changed(deployment: Deployment, *, reconcile: bool = False) -> None:
    """Tell pages and edges that ``deployment`` changed (after commit); queue a reconcile pass when
    ``reconcile``. A deleted deployment (no primary key any more) has its route removed."""
    if deployment.pk is not None:
        publish_deployment_status(deployment)
    routes_publish(deployment)
    if reconcile and deployment.pk is not None:
        queue.deployment_reconcile_later(deployment.pk)
