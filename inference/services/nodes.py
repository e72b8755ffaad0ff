"""Node registration, heartbeats and the sweep that notices silent nodes."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.keyhash import verify_key_text
from accounts.services import audit_record
from contract.generation import GenerationSpec
from contract.manifest import ManifestError, ModelManifest, Preprocessing, Task
from contract.replicas import REPORTABLE
from core.errors import Conflict, ValidationFailed
from inference import queue
from inference.live import publish_deployment_status
from inference.models import Deployment, ModelVersion, Node, NodeStatus, Region, Replica, ReplicaState

log = logging.getLogger("lantau.nodes")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# The inventory key holding the host a node's runners are reached at, pinned at its first heartbeat.
ADVERTISE_HOST = "advertise_host"
DEFAULT_ADVERTISE_HOST = "127.0.0.1"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def runner_token(replica_id: int) -> str:
    """Per-replica secret shared by the gateway and the runner, derived rather than stored."""
    return hmac.new(settings.SECRET_KEY.encode(), f"runner:{replica_id}".encode(), hashlib.sha256).hexdigest()


def node_token_create(*, name: str, region: str, actor=None, max_replicas: int = 8) -> tuple[Node, str]:
    """Create a node (or rotate its token) and return the clear token, shown once."""
    if not _NAME_RE.match(name or ""):
        raise ValidationFailed("node name must be lowercase letters, digits and dashes (max 63)")
    if region not in Region.values:
        raise ValidationFailed(f"region must be one of {', '.join(Region.values)}")
    token = f"ltn_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        node, created = Node.objects.select_for_update().get_or_create(
            name=name,
            defaults={
                "region": region,
                "token_prefix": token[:12],
                "token_hash": token_hash(token),
                "max_replicas": max_replicas,
            },
        )
        if not created:  # a new token may come with a new address: unpin it (see replica_url_allowed)
            node.region, node.token_prefix, node.token_hash = region, token[:12], token_hash(token)
            node.inventory = {k: v for k, v in node.inventory.items() if k != ADVERTISE_HOST}
            node.save(update_fields=["region", "token_prefix", "token_hash", "inventory"])
        audit_record(team=None, actor=actor, action="node.token", target=name, data={"region": region})
    return node, token


def node_authenticate(token: str | None) -> Node | None:
    if not token:
        return None
    return Node.objects.filter(token_hash=token_hash(token)).first()


def manifest_for(replica: Replica) -> ModelManifest:
    """What the runner reads from `lantau.json` in its model folder; ManifestError if the version cannot
    be served. Labels come from the version's labels file (added by the agent) when it has one."""
    version: ModelVersion = replica.model_version
    deployment: Deployment = replica.deployment
    task = version.model.task
    has_labels_file = any(a.role == "labels" for a in version.artifacts.all())
    fields: dict = {"deployment": deployment.name, "model_version": str(version), "task": task,
                    "team_id": deployment.team_id, "model_file": "model.onnx",
                    "key_verify_key": verify_key_text(),  # runners check API-key entries with it
                    "labels": () if has_labels_file else tuple(version.labels or ())}  # fmt: skip
    runtime = version.runtime_config or {}
    if task == Task.IMAGE_CLASSIFICATION:
        fields["preprocessing"] = Preprocessing.from_dict(version.preprocessing)
    elif task == Task.TEXT_GENERATION:
        fields |= {
            "tokenizer_file": "tokenizer.json",
            "generation": GenerationSpec.from_dict(runtime.get("generation")),
        }
    else:
        fields["tokenizer_file"] = "tokenizer.json"
        fields |= {key: runtime[key] for key in ("max_length", "pooling", "normalize") if key in runtime}
    return ModelManifest(**fields)


def _desired_manifest(replica: Replica) -> dict:
    """The manifest as sent to the agent, or the reason the version cannot be served (the agent reports
    the replica failed with it, as it would a runner that refused the manifest)."""
    try:
        return {"manifest": manifest_for(replica).to_dict()}
    except ManifestError as exc:
        return {"manifest": None, "error": str(exc)}


def desired_for(node: Node) -> list[dict]:
    replicas = (
        Replica.objects.filter(node=node)
        .select_related("deployment", "model_version__model")
        .prefetch_related("model_version__artifacts")
    )
    out = []
    for r in replicas:
        artifacts = [
            {
                "filename": a.filename,
                "sha256": a.sha256,
                "size": a.size_bytes,
                "url": f"/api/v1/nodes/artifacts/{a.sha256}",
            }
            for a in r.model_version.artifacts.all()
        ]
        out.append(
            {
                "id": r.pk,
                "deployment": r.deployment.name,
                "version_id": r.model_version_id,
                "artifacts": artifacts,
                **_desired_manifest(r),
                "device": r.deployment.device,
                "batching": {
                    "max_batch_size": r.deployment.max_batch_size,
                    "max_queue_delay_ms": r.deployment.max_queue_delay_ms,
                },
                "runner_token": runner_token(r.pk),
                "redis_prefix": settings.REDIS_PREFIX,
                "limits": runner_limits(),
            }
        )
    return out


def runner_limits() -> dict[str, int]:
    """The request limits runners enforce, from the console's settings (runner ``--max-*`` flags)."""
    return {
        "max_body_bytes": settings.MAX_PREDICT_BYTES,
        "max_json_depth": settings.MAX_JSON_DEPTH,
        "max_prompt_bytes": settings.MAX_PROMPT_BYTES,
        "max_messages": settings.MAX_MESSAGES,
        "max_stop_strings": settings.MAX_STOP_STRINGS,
        "max_inputs": settings.MAX_INPUTS,
        "max_image_pixels": settings.MAX_IMAGE_PIXELS,
    }


def replica_url_allowed(node: Node, url: str) -> bool:
    """Only ``http://<the node's advertised host>:<port>``: the gateway POSTs users' bodies to this URL,
    so a node may not point it at another machine (L1 of the security review)."""
    # An agent that reports no host is taken at its default (--advertise-host 127.0.0.1).
    host = node.inventory.get(ADVERTISE_HOST) or DEFAULT_ADVERTISE_HOST
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return (
        isinstance(host, str)
        and parts.scheme == "http"
        and parts.hostname == host.lower()
        and port is not None
        and parts.netloc == f"{parts.hostname}:{port}"
        and parts.path in ("", "/")
        and not (parts.query or parts.fragment)
    )


def _pinned_inventory(node: Node, inventory: dict) -> dict:
    """The reported inventory, with the advertised host of the node's first heartbeat kept: a node that
    later claims another address is not believed until its token is re-created."""
    pinned = node.inventory.get(ADVERTISE_HOST)
    reported = inventory.get(ADVERTISE_HOST)
    if isinstance(pinned, str) and reported != pinned:
        log.warning("node %s reported advertise host %r; keeping %r", node.name, reported, pinned)
        return {**inventory, ADVERTISE_HOST: pinned}
    if not isinstance(reported, str):
        return {k: v for k, v in inventory.items() if k != ADVERTISE_HOST}
    return {**inventory, ADVERTISE_HOST: reported.lower()}


def node_heartbeat(*, node: Node, region: str, inventory: dict, replicas: list[dict]) -> list[dict]:
    """Record the node's inventory and its replicas' actual state; answer with the desired replicas."""
    if region != node.region:
        raise Conflict(f"this node token belongs to region {node.region!r}, not {region!r}")
    was_offline = node.status == NodeStatus.OFFLINE
    with transaction.atomic():
        node.inventory = _pinned_inventory(node, inventory)
        node.last_heartbeat_at = timezone.now()
        if node.status == NodeStatus.OFFLINE:
            node.status = NodeStatus.ONLINE
        node.save(update_fields=["inventory", "last_heartbeat_at", "status"])
        for report in replicas:
            _apply_report(node, report)
    if was_offline:
        _reconcile_all_later()
    return desired_for(node)


def _apply_report(node: Node, report: dict) -> None:
    state, replica_id = report.get("state"), report.get("id")
    if state not in REPORTABLE or replica_id is None:  # no replica has a null pk: nothing would match
        return
    url = str(report.get("url") or "")[:200]
    if url and not replica_url_allowed(node, url):
        log.warning("node %s reported replica %s at %r, not on its advertised host: ignored", node.name,
                    replica_id, url)  # fmt: skip
        url = ""  # the gateway only routes to replicas with a URL: this one gets no traffic
    fields = {"state": state, "url": url, "error": str(report.get("error") or "")[:2000]}
    changed = Replica.objects.filter(node=node, pk=replica_id).exclude(**fields).update(**fields)
    if not changed:
        return
    deployment = Deployment.objects.filter(replica_set__pk=replica_id).first()
    if deployment is None:
        return
    publish_deployment_status(deployment)
    if state in (
        ReplicaState.FAILED,
        ReplicaState.READY,
    ):  # replace the failed; retire old versions once ready
        queue.deployment_reconcile_later(deployment.pk)


def _reconcile_all_later() -> None:
    queue.deployments_reconcile_all_later()


def nodes_sweep() -> int:
    """Mark nodes silent for longer than LANTAU_NODE_OFFLINE_AFTER_S offline and re-place their replicas."""
    cutoff = timezone.now() - timedelta(seconds=settings.NODE_OFFLINE_AFTER_S)
    silent = Node.objects.exclude(status=NodeStatus.OFFLINE).filter(last_heartbeat_at__lt=cutoff)
    count = silent.update(status=NodeStatus.OFFLINE)
    if count:
        _reconcile_all_later()
    return count
