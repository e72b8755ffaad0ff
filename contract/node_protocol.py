"""The node protocol: what an agent sends in a heartbeat and what the console answers, typed once.

``POST /api/v1/nodes/heartbeat`` is the one conversation that grows with the fleet. Its shapes live
here so both sides name the same fields: the console builds ``DesiredReplica`` entries
(``inference.services.nodes.desired_for``) and its request schema follows ``HeartbeatRequest``; the
agent builds the request (``inference.agent.main``) and reads the answer through
``heartbeat_answer_parse``, which refuses anything that is not the shape below (an answer is data from
another process: checked before any field becomes a path, a flag or a process).

The types are ``TypedDict``s: on the wire they are exactly today's JSON objects, so agents and consoles
of neighbouring releases keep talking (tests/contract/test_node_protocol.py feeds recorded payloads
through them and gets the same bytes back). A field a newer console adds is kept and ignored by an older
agent; a field an older console lacks takes the default stated here.

The runners' request limits are listed here once (``RUNNER_LIMITS``): the console's settings they come
from, the key in a desired replica's ``limits``, and the runner's ``--max-*`` flag.
"""

# No ``from __future__ import annotations``: TypedDict needs NotRequired evaluated to tell required keys
# from optional ones (``__required_keys__``, which the tests compare with what each side sends).
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

RUNNER_TOKEN_HEADER = "X-Lantau-Runner-Token"  # edge, console and agent -> runner: the replica's secret
KEY_ID_HEADER = "X-Lantau-Key-Id"  # edge -> runner: the API key already checked upstream


@dataclass(frozen=True)
class RunnerLimit:
    """One request limit a runner enforces: ``key`` in a desired replica's ``limits``, set on the
    console by ``setting`` (``LANTAU_<setting>``), given to the runner as ``flag``."""

    key: str
    setting: str
    flag: str
    field: str  # the runner's name for it (``RequestLimits`` field; ``max_body_bytes`` for the body)
    help: str


RUNNER_LIMITS: tuple[RunnerLimit, ...] = (
    RunnerLimit("max_body_bytes", "MAX_PREDICT_BYTES", "--max-body-bytes", "max_body_bytes",
                "largest request body in bytes (413 above)"),
    RunnerLimit("max_json_depth", "MAX_JSON_DEPTH", "--max-json-depth", "json_depth",
                "deepest JSON nesting accepted (400 above)"),
    RunnerLimit("max_prompt_bytes", "MAX_PROMPT_BYTES", "--max-prompt-bytes", "prompt_bytes",
                "largest prompt or chat messages, UTF-8 bytes (413 above)"),
    RunnerLimit("max_messages", "MAX_MESSAGES", "--max-messages", "messages",
                "most chat messages in one request (422 above)"),
    RunnerLimit("max_stop_strings", "MAX_STOP_STRINGS", "--max-stop-strings", "stop_strings",
                "most 'stop' strings in one request (422 above)"),
    RunnerLimit("max_inputs", "MAX_INPUTS", "--max-inputs", "inputs",
                "most texts in one predict or embeddings request (422 above)"),
    RunnerLimit("max_image_pixels", "MAX_IMAGE_PIXELS", "--max-image-pixels", "image_pixels",
                "largest image, width x height, checked before decoding (422 above)"),
)  # fmt: skip
LIMIT_KEYS = frozenset(limit.key for limit in RUNNER_LIMITS)


class ArtifactFile(TypedDict):
    """A file of the version, fetched by the agent from ``url`` (on the console) and checked by SHA-256."""

    filename: str
    sha256: str
    size: int
    url: str


class Batching(TypedDict):
    max_batch_size: int
    max_queue_delay_ms: int


class DesiredReplica(TypedDict):
    """One replica the node should run, as the console answers it."""

    id: int
    deployment: str
    version_id: int
    artifacts: list[ArtifactFile]
    manifest: dict[str, Any] | None  # contract.manifest.ModelManifest.to_dict(); None with ``error``
    gpu_index: int | None  # the agent pins CUDA_VISIBLE_DEVICES to it
    device: str  # cpu, cuda or tensorrt
    batching: Batching
    runner_token: str
    redis_prefix: str
    limits: dict[str, int]  # keys of RUNNER_LIMITS
    error: NotRequired[str]  # the version cannot be served: the agent reports the replica failed
    redis_user: NotRequired[str]  # with LANTAU_REDIS_ACL: the deployment's own Redis user
    redis_password: NotRequired[str]


# What a runner is started from: a desired replica whose values of these changed needs a new runner.
SPEC_KEYS = ("deployment", "version_id", "artifacts", "manifest", "device", "gpu_index", "batching",
             "limits", "redis_prefix", "runner_token", "redis_user", "redis_password")  # fmt: skip


class HeartbeatAnswer(TypedDict):
    node: str
    region: str
    replicas: list[DesiredReplica]
    rotate_credential: bool


class ReplicaReport(TypedDict):
    """What the agent says of one replica: its state (``contract.replicas``) and, once known, where it
    answers, why it failed, and the GPU memory it took."""

    id: int
    state: str
    url: NotRequired[str]
    error: NotRequired[str]
    gpu_memory_bytes: NotRequired[int]


class HeartbeatRequest(TypedDict):
    region: str
    inventory: dict[str, Any]  # inference.agent.inventory.collect, plus labels, advertise_host, edge
    replicas: list[ReplicaReport]


class ProtocolError(ValueError):
    """An answer that is not the node protocol's shape; the message says which field."""


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def heartbeat_answer_parse(body: object) -> HeartbeatAnswer:
    """The console's answer, checked: an object with a list of ``replicas`` and a boolean
    ``rotate_credential`` (default false). Each desired replica is checked further by the agent before
    its fields become paths (``inference.agent.artifacts.desired_problem``), so one bad entry fails
    that replica, not the heartbeat. Raises ``ProtocolError``."""
    if not isinstance(body, dict):
        raise ProtocolError("the heartbeat answer is not a JSON object")
    replicas = body.get("replicas")
    if not isinstance(replicas, list):
        raise ProtocolError("the heartbeat answer holds no list of replicas")
    rotate = body.get("rotate_credential", False)
    if not isinstance(rotate, bool):
        raise ProtocolError("rotate_credential is not true or false")
    node, region = body.get("node", ""), body.get("region", "")
    if not isinstance(node, str) or not isinstance(region, str):
        raise ProtocolError("node and region must be strings")
    return {"node": node, "region": region, "replicas": replicas, "rotate_credential": rotate}


def limits_of(desired: DesiredReplica | dict[str, Any]) -> dict[str, int]:
    """The known, positive integer limits of a desired replica; anything else is left to the runner's
    defaults (a console of a newer release may send limits this agent does not know)."""
    limits = desired.get("limits")
    if not isinstance(limits, dict):
        return {}
    return {name: value for name, value in limits.items() if name in LIMIT_KEYS and _int(value) and value > 0}


def gpu_index_of(desired: DesiredReplica | dict[str, Any]) -> int | None:
    index = desired.get("gpu_index")
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else None


DEVICES = ("cpu", "cuda", "tensorrt")


def device_of(desired: DesiredReplica | dict[str, Any]) -> str:
    device = desired.get("device")
    return device if isinstance(device, str) and device in DEVICES else "cpu"
