"""Nodes: listed for people, managed by install administrators (join tokens, cordon, drain, remove,
credential rotation; a team's own nodes also by its owners and admins); joining, heartbeat, credential
exchange and artifact download for node agents."""

import json
import threading

from django.db import connection
from django.http import FileResponse, HttpResponse
from ninja import Router, Status
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from pydantic import ValidationError as PydanticValidationError

from core.errors import BadRequest, NotFound, Unauthorized, ValidationFailed
from core.schemas import validation_message
from inference import selectors, storage
from inference.models import Artifact
from inference.schemas import (
    HeartbeatIn,
    HeartbeatOut,
    JoinTokenIn,
    JoinTokenOut,
    NodeCredentialOut,
    NodeJoinIn,
    NodeJoinOut,
    NodeOut,
)
from inference.services.node_join import join_token_create, node_edge_config, node_join
from inference.services.nodes import (
    heartbeat_snapshot,
    node_authenticate,
    node_cordon,
    node_credential_rotate,
    node_drain,
    node_get,
    node_heartbeat,
    node_remove,
    node_rotate_request,
    node_uncordon,
)

router = Router(tags=["nodes"])
# At most this many heartbeats use PostgreSQL at once, each with its own connection: a burst (a fleet
# coming back, a console restart) waits here instead of exhausting max_connections (daphne runs each
# request in its own thread, so nothing else bounds them), and people's pages keep theirs.
HEARTBEAT_CONCURRENCY = 4
_heartbeat_slots = threading.BoundedSemaphore(HEARTBEAT_CONCURRENCY)


class NodeTokenAuth(HttpBearer):
    def authenticate(self, request, token):
        return node_authenticate(token)


class NodeBearer(HttpBearer):
    """The bearer token alone: the heartbeat checks it against the database once it holds a slot."""

    def authenticate(self, request, token):
        return token or None


def _shown(request, node):
    """The hardware inventory (host names, devices, versions) is shown to staff only (review L5)."""
    if not request.auth.user.is_staff:
        node.inventory = {}  # in memory only, for this answer
    return node


@router.get("", response=list[NodeOut])
def node_list(request):
    """Every member sees where capacity is (region, status, mode, labels, replica count)."""
    return [_shown(request, node) for node in selectors.nodes_with_load(team=request.auth.team)]


@router.post("/join", auth=None, response={201: NodeJoinOut})
def node_join_route(request, payload: NodeJoinIn):
    """A new node's agent exchanges a single-use join token for its own credential (shown once).
    401: unknown or expired token; 409: token already used, other region, or a ready node's name."""
    node, token = node_join(
        join_token=payload.join_token, name=payload.name, region=payload.region, labels=payload.labels
    )
    return Status(201, {"node": node.name, "region": node.region, "node_token": token})


@router.post("/join-tokens", response={201: JoinTokenOut})
def join_token_new(request, payload: JoinTokenIn):
    """A join token for one new node of the shared fleet (install administrators), or with ``for_team``
    one the current team alone uses (its owners and admins, when ``LANTAU_TEAM_NODES`` allows); the
    clear token is in this answer only."""
    token, clear = join_token_create(
        actor=request.auth.user, team=request.auth.team, region=payload.region, labels=payload.labels,
        ttl_s=payload.ttl_s, name_hint=payload.name_hint, for_team=payload.for_team,
    )  # fmt: skip
    return Status(201, {"id": token.pk, "join_token": clear, "region": token.region, "labels": token.labels,
                        "name_hint": token.name_hint, "expires_at": token.expires_at})  # fmt: skip


@router.post("/heartbeat", auth=NodeBearer(), response=HeartbeatOut)
def node_beat(request, payload: HeartbeatIn):
    """Called by a node agent every few seconds: reports actual state, answers desired replicas and
    whether to rotate its credential. Under daphne, ``console.asgi`` hands this path to
    ``inference.api.heartbeat`` before Django (same checks, same answers, fewer costs); this view
    serves it everywhere else (tests' client, other hosts)."""
    with _heartbeat_slots:
        snapshot = heartbeat_snapshot(request.auth)
        if snapshot is None:
            raise AuthenticationError()  # the same 401 as every other credential check
        answer = _beat(snapshot, payload)
        if not connection.in_atomic_block:  # give the connection back now, not when the answer is sent
            connection.close()
    return answer


def _beat(snapshot, payload: HeartbeatIn) -> dict:
    """Record the heartbeat of the snapshot's node; the answer both routes send."""
    node = snapshot.node
    answer = node_heartbeat(node=node, region=payload.region, inventory=payload.inventory,
                            replicas=[r.model_dump() for r in payload.replicas], snapshot=snapshot)  # fmt: skip
    return {"node": node.name, "region": node.region, **answer}


# The answers console.api gives the view above, for the heartbeat's own route (inference.api.heartbeat).
HEARTBEAT_UNAUTHORIZED = "sign in or send a valid API key with the `manage` scope"


def heartbeat_answer(token: str | None, body: bytes) -> dict:
    """The heartbeat as ``node_beat`` runs it, from the bearer token and the raw body: the credential
    first (401, before anything about the body is said), then the body (400, 422), then
    ``node_heartbeat``. Raises ``ApplicationError`` (or a database error) for the caller to answer."""
    snapshot = heartbeat_snapshot(token)
    if snapshot is None:
        raise Unauthorized(HEARTBEAT_UNAUTHORIZED)
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        raise BadRequest("Cannot parse request body") from None
    try:
        payload = HeartbeatIn.model_validate(data)
    except PydanticValidationError as exc:
        raise ValidationFailed(validation_message(exc.errors())) from None
    return _beat(snapshot, payload)


@router.post("/credential", auth=NodeTokenAuth(), response=NodeCredentialOut)
def node_credential(request):
    """Exchange the calling node's credential for a new one; the old one stops working at once."""
    return {"node_token": node_credential_rotate(node=request.auth)}


@router.get("/artifacts/{sha256}", auth=NodeTokenAuth())
def artifact_download(request, sha256: str):
    """Stream a stored file, only to a node that hosts a replica needing it."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise NotFound("artifact not found")
    allowed = Artifact.objects.filter(sha256=sha256, version__replicas__node=request.auth).exists()
    if not allowed or not storage.exists(sha256):
        raise NotFound("artifact not found")
    return FileResponse(open(storage.blob_path(sha256), "rb"), content_type="application/octet-stream")


@router.get("/edge-config", auth=NodeTokenAuth())
def node_edge_config_route(request, response: HttpResponse):
    """The environment of the edge process this node's agent runs (``--edge-port``): the edge key (a
    secret), the public key of signed entries, Redis and its prefix. Only for a node that joined with
    a join token an install administrator made with ``edge`` (label ``lantau.io/edge=true``); 403 otherwise.
    Declared before ``/{name}``, which would otherwise take the path."""
    response.headers["Cache-Control"] = "no-store"
    return node_edge_config(node=request.auth)


@router.get("/{name}", response=NodeOut)
def node_show(request, name: str):
    return _shown(request, node_get(name=name, team=request.auth.team))


def _act(request, name: str, action) -> object:
    node = action(
        actor=request.auth.user, team=request.auth.team, node=node_get(name=name, team=request.auth.team)
    )
    return _shown(request, node)


@router.post("/{name}/cordon", response=NodeOut)
def node_cordon_route(request, name: str):
    """No new replicas on the node; those there keep serving."""
    return _act(request, name, node_cordon)


@router.post("/{name}/uncordon", response=NodeOut)
def node_uncordon_route(request, name: str):
    """The node takes new replicas again (ends a cordon or a drain)."""
    return _act(request, name, node_uncordon)


@router.post("/{name}/drain", response=NodeOut)
def node_drain_route(request, name: str):
    """Move replicas off: each goes once its replacement elsewhere is ready."""
    return _act(request, name, node_drain)


@router.post("/{name}/rotate", response=NodeOut)
def node_rotate_route(request, name: str):
    """Ask the node's agent to exchange its credential at its next heartbeat."""
    return _act(request, name, node_rotate_request)


@router.delete("/{name}", response={204: None})
def node_delete_route(request, name: str):
    """Forget the node (its credential stops working; replicas are placed elsewhere at once)."""
    node_remove(
        actor=request.auth.user, team=request.auth.team, node=node_get(name=name, team=request.auth.team)
    )
    return Status(204, None)
