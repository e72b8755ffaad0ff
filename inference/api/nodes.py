"""Nodes: listed for people; heartbeat and artifact download for node agents (node token auth)."""

from django.http import FileResponse
from ninja import Router
from ninja.security import HttpBearer

from core.errors import NotFound
from inference import selectors, storage
from inference.models import Artifact
from inference.schemas import HeartbeatIn, NodeOut
from inference.services.nodes import node_authenticate, node_heartbeat

router = Router(tags=["nodes"])


class NodeTokenAuth(HttpBearer):
    def authenticate(self, request, token):
        return node_authenticate(token)


@router.get("", response=list[NodeOut])
def node_list(request):
    """Every member sees where capacity is (region, status, replica count); the hardware inventory
    (host names, devices, versions) is shown to staff only (review finding L5)."""
    nodes = list(selectors.nodes_all())
    if not request.auth.user.is_staff:
        for node in nodes:
            node.inventory = {}  # in memory only, for this answer
    return nodes


@router.post("/heartbeat", auth=NodeTokenAuth())
def node_beat(request, payload: HeartbeatIn):
    """Called by a node agent every few seconds: reports actual state, answers desired replicas."""
    node = request.auth
    desired = node_heartbeat(
        node=node,
        region=payload.region,
        inventory=payload.inventory,
        replicas=[r.dict() for r in payload.replicas],
    )
    return {"node": node.name, "region": node.region, "replicas": desired}


@router.get("/artifacts/{sha256}", auth=NodeTokenAuth())
def artifact_download(request, sha256: str):
    """Stream a stored file, only to a node that hosts a replica needing it."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise NotFound("artifact not found")
    allowed = Artifact.objects.filter(sha256=sha256, version__replicas__node=request.auth).exists()
    if not allowed or not storage.exists(sha256):
        raise NotFound("artifact not found")
    return FileResponse(open(storage.blob_path(sha256), "rb"), content_type="application/octet-stream")
