"""Node registration, heartbeats and the sweep that notices silent nodes.

Joining with a join token is in
``inference.services.node_join``; the operator's lifecycle actions (cordon, drain, remove) are at
the end of this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction

from accounts.install_admin import NOT_ADMIN, audit_fleet, is_install_admin
from accounts.keyhash import verify_key_text
from accounts.models import Membership, Team
from accounts.permissions import role_allows
from accounts.services import audit_record
from contract.generation import GenerationSpec
from contract.manifest import ManifestError, ModelManifest, Preprocessing, Task
from contract.node_protocol import RUNNER_LIMITS, DesiredReplica
from contract.replicas import REPORTABLE
from core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from core.live import publish
from inference import liveness, queue
from inference.credentials import runner_token, token_hash
from inference.live import (
    NODE_STATS_KEEP,
    NODE_STATS_TTL_S,
    node_stats_group,
    node_stats_payload,
)
from inference.models import (
    Artifact,
    Deployment,
    GpuFootprint,
    ModelVersion,
    Node,
    NodeMode,
    NodeStatus,
    Replica,
    ReplicaState,
)
from inference.services.deployment_changes import deployment_changed
from inference.services.redis_users import redis_runner_credentials
from inference.services.regions import region_require
from inference.services.rollouts import IN_PROGRESS, spec_digest

log = logging.getLogger("lantau.nodes")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# The inventory key holding the host a node's runners are reached at, pinned at its first heartbeat.
ADVERTISE_HOST = "advertise_host"
DEFAULT_ADVERTISE_HOST = "127.0.0.1"


def node_token_create(*, name: str, region: str, actor=None, max_replicas: int = 8) -> tuple[Node, str]:
    """Create a node (or rotate its token) and return the clear token, shown once."""
    if not _NAME_RE.match(name or ""):
        raise ValidationFailed("node name must be lowercase letters, digits and dashes (max 63)")
    region_require(region)
    token = f"ltn_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        region_require(region, lock=True)
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


# A version, its files and a deployment's name never change once committed, so what heartbeats send
# about them is computed once per console process (a heartbeat then reads one row per replica).
_CACHE_MAX = 4096
_manifests: dict[tuple[int, int], dict] = {}  # (deployment id, version id) -> _desired_manifest
_files: dict[int, list[dict]] = {}  # version id -> its artifacts as the agent downloads them


def _manifest_of(replica: Replica) -> dict:
    key = (replica.deployment_id, replica.model_version_id)
    entry = _manifests.get(key)
    if entry is None:
        if len(_manifests) >= _CACHE_MAX:
            _manifests.clear()
        entry = _manifests[key] = _desired_manifest(replica)
    return entry


def _files_of(version_id: int) -> list[dict]:
    files = _files.get(version_id)
    if files is None:
        if len(_files) >= _CACHE_MAX:
            _files.clear()
        rows = Artifact.objects.filter(version_id=version_id).order_by("pk")
        files = _files[version_id] = [
            {"filename": a.filename, "sha256": a.sha256, "size": a.size_bytes,
             "url": f"/api/v1/nodes/artifacts/{a.sha256}"}
            for a in rows
        ]  # fmt: skip
    return files


# What a heartbeat reads of a node's replicas and their deployments: not the deployments' placement
# (per-node reasons, large with many nodes) or autoscaling history, which answers do not need.
_BEAT_COLUMNS = (
    "id", "deployment_id", "node_id", "model_version_id", "state", "url", "error", "gpu_index", "spec",
    "deployment__id", "deployment__name", "deployment__team_id", "deployment__model_version_id",
    "deployment__region", "deployment__device", "deployment__max_batch_size", "deployment__max_queue_delay_ms",
    "deployment__node_selector", "deployment__rollout",
)  # fmt: skip


def _replicas_of(node: Node) -> list[Replica]:
    return list(Replica.objects.filter(node=node).select_related("deployment").only(*_BEAT_COLUMNS))


def desired_for(node: Node, replicas: list[Replica] | None = None) -> list[DesiredReplica]:
    """The replicas the node should run, as its agent reads them (see docs/api.md, heartbeat)."""
    replicas = _replicas_of(node) if replicas is None else replicas
    out: list[DesiredReplica] = []
    for r in replicas:
        out.append(
            cast(DesiredReplica, {
                "id": r.pk,
                "deployment": r.deployment.name,
                "version_id": r.model_version_id,
                "artifacts": _files_of(r.model_version_id),
                **_manifest_of(r),
                "gpu_index": r.gpu_index,  # the agent pins CUDA_VISIBLE_DEVICES to it
                **_runs_with(r),
                "runner_token": runner_token(r.pk),
                "redis_prefix": settings.REDIS_PREFIX,
                **redis_runner_credentials(r.deployment.name),  # its deployment's Redis user (ACLs on)
                "limits": runner_limits(),
            })
        )  # fmt: skip
    return out


def _runs_with(replica: Replica) -> dict:
    """The device and batching ``replica`` was started with: its deployment's now, except for an
    outdated replica while an update rolls out, which keeps the settings rolled from (``rollout["from"]``)
    until the reconciler replaces it; else the agent would restart every old runner in place at once."""
    d = replica.deployment
    now = {"device": d.device, "max_batch_size": d.max_batch_size, "max_queue_delay_ms": d.max_queue_delay_ms}
    rollout = d.rollout or {}
    before = (
        rollout.get("from")
        if rollout.get("state") == IN_PROGRESS and rollout.get("kind") != "canary"
        else None
    )
    if isinstance(before, dict) and replica.spec and replica.spec != spec_digest(d, replica.model_version_id):
        now = {k: before.get(k, v) for k, v in now.items()}
    batching = {"max_batch_size": now["max_batch_size"], "max_queue_delay_ms": now["max_queue_delay_ms"]}
    return {"device": now["device"], "batching": batching}


def runner_limits() -> dict[str, int]:
    """The request limits runners enforce, from the console's settings (``contract.node_protocol``)."""
    return {limit.key: getattr(settings, limit.setting) for limit in RUNNER_LIMITS}


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


# Inventory fields whose change is worth a PostgreSQL write (the rest, such as load, only go to Redis).
_STATIC_FIELDS = ("cpus", "memory_bytes", "providers", "hostname", ADVERTISE_HOST, "edge", "runner_isolation")


def inventory_fingerprint(inventory: dict) -> str:
    """What of an inventory matters to placement and pages; GPU free memory counted in whole GiB."""
    gpus: list = inventory["gpus"] if isinstance(inventory.get("gpus"), list) else []
    parts: list = [inventory.get(k) for k in _STATIC_FIELDS]
    for gpu in gpus:
        if isinstance(gpu, dict):
            free = gpu.get("memory_free")
            parts.append((gpu.get("index"), gpu.get("uuid"), gpu.get("name"), gpu.get("memory_total"),
                          int(free) >> 30 if isinstance(free, int | float) else None))  # fmt: skip
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class BeatSnapshot:
    """A node as its heartbeats need it: the row, its replicas with their deployments, and (once
    computed) the answer's desired replicas, valid while ``version`` is what PostgreSQL says."""

    version: str
    node: Node
    rows: list[Replica]
    desired: list[DesiredReplica] | None = None


_snapshots: dict[str, BeatSnapshot] = {}  # token hash -> the node's last snapshot in this process

# One indexed read per heartbeat, on the token's hash: the node's id and a version of everything its
# answer depends on, i.e. the row versions (``xmin``: PostgreSQL gives every inserted or updated row
# version the id of the transaction that wrote it) of the node, its replicas and their deployments.
# Any change of a credential (the hash no longer matches), a removal (no row), a replica placed,
# changed or deleted, a deployment's settings or rollout, or the node's status or rotation request
# gives another version; an equal version lets the heartbeat reuse the rows and answer it had.
_VERSION_SQL = (
    "SELECT n.id, n.xmin::text || '|' || coalesce(string_agg("
    "r.id::text || ':' || r.xmin::text || ':' || d.xmin::text, ',' ORDER BY r.id), '') "
    "FROM inference_node n LEFT JOIN inference_replica r ON r.node_id = n.id "
    "LEFT JOIN inference_deployment d ON d.id = r.deployment_id "
    "WHERE n.token_hash = %s GROUP BY n.id"
)


def heartbeat_snapshot(token: str | None) -> BeatSnapshot | None:
    """The node ``token`` authenticates, with its replicas (None: no such credential). Always one read
    of PostgreSQL, so a rotated credential or a removed node is refused at once; the rows are read again
    only when their version changed."""
    if not token:
        return None
    digest = token_hash(token)
    with connection.cursor() as cursor:
        cursor.execute(_VERSION_SQL, [digest])
        found = cursor.fetchone()
    if found is None:
        _snapshots.pop(digest, None)
        return None
    node_id, version = found
    known = _snapshots.get(digest)
    if known is not None and known.version == version:
        return known
    node = Node.objects.filter(pk=node_id, token_hash=digest).first()
    if node is None:  # removed or rotated since the read above
        return None
    if len(_snapshots) >= _CACHE_MAX:
        _snapshots.clear()
    snapshot = _snapshots[digest] = BeatSnapshot(version, node, _replicas_of(node))
    return snapshot


def node_heartbeat(
    *, node: Node, region: str, inventory: dict, replicas: list[dict], snapshot: BeatSnapshot | None = None
) -> dict:
    """Record the node's inventory and its replicas' actual state; answer with the desired replicas.

    Liveness and the fresh inventory go to Redis (``inference.liveness``). PostgreSQL is written only
    when something changed: the node comes back, its inventory changed meaningfully, a replica's
    state changed, or LANTAU_NODE_PERSIST_EVERY_S passed since the row's last write. With the node's
    ``snapshot`` (``heartbeat_snapshot``) nothing more is read unless something changed.
    """
    if region != node.region:
        raise Conflict(f"this node token belongs to region {node.region!r}, not {region!r}")
    now = time.time()
    pinned = _pinned_inventory(node, inventory)
    figures = node_stats_payload(node.name, pinned, now)
    group = node_stats_group(node.name)
    stats = liveness.Stats(
        json.dumps(figures, separators=(",", ":")), NODE_STATS_KEEP, NODE_STATS_TTL_S, group
    )
    remembered = liveness.remember(node.name, pinned, now, stats)
    kept = remembered.kept
    came_back = node.status != NodeStatus.ONLINE
    last = node.last_heartbeat_at.timestamp() if node.last_heartbeat_at else 0.0
    due = not kept or now - last >= settings.NODE_PERSIST_EVERY_S
    rows = snapshot.rows if snapshot is not None else _replicas_of(node)
    try:
        with transaction.atomic():
            if came_back or due or inventory_fingerprint(pinned) != inventory_fingerprint(node.inventory):
                node.inventory, node.status = pinned, NodeStatus.ONLINE
                node.last_heartbeat_at = datetime.fromtimestamp(now, tz=UTC)
                Node.objects.filter(pk=node.pk).update(
                    inventory=pinned, status=NodeStatus.ONLINE, last_heartbeat_at=node.last_heartbeat_at
                )
            by_id = {r.pk: r for r in rows}
            for report in replicas:
                _apply_report(node, by_id, report)
            if remembered.watched:  # a node page is open: push the figures to it
                publish(group, "node_stats", dict(figures))
    except BaseException:
        if snapshot is not None:  # what it holds in memory may be ahead of what was rolled back
            _snapshots.pop(node.token_hash, None)
        raise
    if came_back:  # its replicas were re-placed while it was away: converge, never duplicate
        log.info("node %s is ready again", node.name)
        _reconcile_all_soon()
    if snapshot is None:
        desired = desired_for(node, rows)
    elif snapshot.desired is None:  # the answer depends on nothing a heartbeat writes (not the states)
        desired = snapshot.desired = desired_for(node, rows)
    else:
        desired = snapshot.desired
    return {"replicas": desired, "rotate_credential": node.rotate_requested}


def _apply_report(node: Node, rows: dict[int, Replica], report: dict) -> None:
    state, replica_id = report.get("state"), report.get("id")
    replica = rows.get(replica_id) if isinstance(replica_id, int) else None
    if state not in REPORTABLE or replica is None:  # not this node's replica (or gone): nothing to do
        return
    url = str(report.get("url") or "")[:200]
    if url and not replica_url_allowed(node, url):
        log.warning("node %s reported replica %s at %r, not on its advertised host: ignored", node.name,
                    replica_id, url)  # fmt: skip
        url = ""  # the gateway only routes to replicas with a URL: this one gets no traffic
    fields = {"state": state, "url": url, "error": str(report.get("error") or "")[:2000]}
    measured = report.get("gpu_memory_bytes")
    if state == ReplicaState.READY and isinstance(measured, int) and measured > 0:
        _footprint_record(node, replica, measured)
    if all(getattr(replica, k) == v for k, v in fields.items()):
        return  # the usual heartbeat: nothing changed, nothing written
    changed = Replica.objects.filter(node=node, pk=replica.pk).exclude(**fields).update(**fields)
    for key, value in fields.items():
        setattr(replica, key, value)
    if not changed:
        return
    deployment = Deployment.objects.filter(pk=replica.deployment_id).first()  # the whole row: pages, edges
    if deployment is None:  # deleted meanwhile; its replicas went with it
        return
    # replace the failed; roll on once ready
    deployment_changed(deployment, reconcile=state in (ReplicaState.FAILED, ReplicaState.READY))


_FOOTPRINTS_SEEN: set[int] = set()  # replicas whose footprint this process recorded already


def _footprint_record(node: Node, replica: Replica, measured: int) -> None:
    """Remember what a GPU replica took at first load, per version, GPU kind, device and batch size."""
    if replica.gpu_index is None or replica.pk in _FOOTPRINTS_SEEN:
        return
    gpus = [g for g in node.inventory.get("gpus") or [] if isinstance(g, dict)]
    name = next((str(g.get("name")) for g in gpus if g.get("index") == replica.gpu_index), "")
    deployment = replica.deployment
    GpuFootprint.objects.update_or_create(
        model_version_id=replica.model_version_id,
        gpu_name=name[:128],
        device=deployment.device,
        max_batch_size=deployment.max_batch_size,
        defaults={"bytes": measured},
    )
    _FOOTPRINTS_SEEN.add(replica.pk)


def _reconcile_all_later() -> None:
    queue.deployments_reconcile_all_later()


# Nodes coming back together (a console restart, a network blip, a fleet joining) share one pass over
# every deployment: the first of each window asks for it to run a window later, by which time the
# others' heartbeats have committed; the rest ask for nothing.
RETURN_RECONCILE_WINDOW_S = 1.0


def _reconcile_all_soon() -> None:
    if liveness.first_in_window("reconcile-all", RETURN_RECONCILE_WINDOW_S):
        queue.deployments_reconcile_all_later(countdown=RETURN_RECONCILE_WINDOW_S)


def nodes_sweep() -> int:
    """Mark nodes not heard from for LANTAU_NODE_OFFLINE_AFTER_S not ready; their replicas get re-placed.

    The last heartbeat is the later of Redis's (every beat) and the row's (every few beats), so a
    flushed Redis does not take every node down, and a stopped Redis still lets silent nodes go.
    """
    cutoff = time.time() - settings.NODE_OFFLINE_AFTER_S
    seen = liveness.seen_all()
    silent = []
    for pk, name, at in Node.objects.filter(status=NodeStatus.ONLINE).values_list(
        "pk", "name", "last_heartbeat_at"
    ):
        if max(seen.get(name, 0.0), at.timestamp() if at else 0.0) < cutoff:
            silent.append(pk)
    count = Node.objects.filter(pk__in=silent, status=NodeStatus.ONLINE).update(status=NodeStatus.OFFLINE)
    if count:
        log.info("%d node(s) not ready: no heartbeat for %ss", count, settings.NODE_OFFLINE_AFTER_S)
        _reconcile_all_later()
    return count


# ---- operators' lifecycle actions (C2's node page buttons and the API call these) ----------------


def node_require_manager(*, actor, team: Team | None = None, node: Node | None = None) -> None:
    """Refuse anyone but install administrators (``accounts.install_admin``): the shared fleet serves
    every team, so no team role manages it (review H-A). The one exception is a node a team brought
    itself (``Node.team``, with ``LANTAU_TEAM_NODES``): that team's owners and admins (``node.manage``)
    manage it too. ``team`` is the caller's current team, kept for the callers that pass it."""
    if is_install_admin(actor):
        return
    if node is not None and node.team_id is not None and settings.TEAM_NODES:
        membership = Membership.objects.filter(team_id=node.team_id, user=actor).first() if actor else None
        if membership is not None and role_allows(membership.role, "node.manage"):
            return
        if membership is not None:
            raise Forbidden(f"your role ({membership.role}) does not allow node.manage")
    raise Forbidden(NOT_ADMIN)


def node_teams(node: Node) -> list[int]:
    """The teams a node action touches: those with replicas on it, and its own team."""
    teams = set(Replica.objects.filter(node=node).values_list("deployment__team_id", flat=True))
    if node.team_id is not None:
        teams.add(node.team_id)
    return sorted(teams)


def nodes_visible(*, team: Team | None):
    """The nodes a member of ``team`` sees: the shared fleet and the team's own (None: every node)."""
    qs = Node.objects.all()
    return qs if team is None else qs.visible_to(team.pk)


def node_get(*, name: str, team: Team | None = None) -> Node:
    """The node called ``name``; with ``team``, only one that team may see (404 for another team's own)."""
    node = nodes_visible(team=team).filter(name=name).first()
    if node is None:
        raise NotFound(f"node {name!r} not found")
    return node


def _mode_set(*, actor, node: Node, mode: str, team: Team | None) -> Node:
    node_require_manager(actor=actor, team=team, node=node)
    with transaction.atomic():
        before = Node.objects.select_for_update().get(pk=node.pk).mode
        Node.objects.filter(pk=node.pk).update(mode=mode)
        node.mode = mode
        audit_fleet(actor=actor, action=f"node.{mode}" if mode != NodeMode.ACTIVE else "node.uncordon",
                    target=node.name, teams=node_teams(node), before={"mode": before},
                    after={"mode": mode})  # fmt: skip
        _reconcile_all_later()
    return node


def node_cordon(*, actor, node: Node, team: Team | None = None) -> Node:
    """No new replicas on the node; the ones there keep serving."""
    return _mode_set(actor=actor, node=node, mode=NodeMode.CORDONED, team=team)


def node_uncordon(*, actor, node: Node, team: Team | None = None) -> Node:
    """The node takes new replicas again (ends a cordon or a drain)."""
    return _mode_set(actor=actor, node=node, mode=NodeMode.ACTIVE, team=team)


def node_drain(*, actor, node: Node, team: Team | None = None) -> Node:
    """Move the node's replicas elsewhere: each is removed only once its replacement is ready."""
    return _mode_set(actor=actor, node=node, mode=NodeMode.DRAINING, team=team)


def node_remove(*, actor, node: Node, team: Team | None = None) -> None:
    """Forget the node: its credential stops working and its replicas are placed elsewhere at once
    (drain first to move them without failed requests). It may join again under the same name."""
    node_require_manager(actor=actor, team=team, node=node)
    with transaction.atomic():
        name = node.name
        teams = node_teams(node)
        Node.objects.filter(pk=node.pk).delete()  # its replicas go with it
        audit_fleet(actor=actor, action="node.remove", target=name, teams=teams)
        _reconcile_all_later()
    transaction.on_commit(lambda: liveness.forget(name))


def node_rotate_request(*, actor, node: Node, team: Team | None = None) -> Node:
    """Ask the node's agent (in its next heartbeat answer) to exchange its credential for a new one."""
    node_require_manager(actor=actor, team=team, node=node)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(rotate_requested=True)
        node.rotate_requested = True
        audit_fleet(actor=actor, action="node.rotate", target=node.name, teams=node_teams(node))
    return node


def node_credential_rotate(*, node: Node) -> str:
    """A new credential for the calling node; the one it authenticated with stops working."""
    token = f"ltn_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            token_prefix=token[:12], token_hash=token_hash(token), rotate_requested=False
        )
        audit_fleet(actor=None, action="node.credential", target=node.name, teams=node_teams(node))
    return token
