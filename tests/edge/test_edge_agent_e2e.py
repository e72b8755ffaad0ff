"""An edge started by a node agent, end to end on the shared stack (console, worker, the hk node agent
``local``): a second hk agent joins with an edge join token and ``--edge-port``, fetches the edge's
secrets with its credential, and runs ``python -m inference.edge`` for hk.

* Requests through that edge are served in hk (``X-Lantau-Served-By``), with an ordinary API key.
* The console learns from the agent's heartbeats where the edge listens and whether it serves.
* The edge key reaches the edge in its environment only: not on a command line, not in the agent's log.
* A killed edge is started again by the agent, and serves again; a clean agent stop stops it.
* ``local`` joined without an edge token: the console refuses it the edge's configuration (403).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from contract.routes import EDGE_KEY_ENV, SERVED_BY_HEADER
from inference.agent.supervisor import process_alive
from inference.services.node_join import EDGE_LABEL
from tests.support.deployments import deploy_colours
from tests.support.factories import image_bytes
from tests.support.stack import Stack, edge_pids

pytestmark = pytest.mark.e2e
NODE, NAME = "hk-edge", "agent-edge-colours"  # test_keys_at_the_edge_e2e has edge-colours
RED = image_bytes((250, 10, 10))


def wait_for(check: Callable[[], object], what: str, stack: Stack, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, KeyError, TypeError):
            pass
        time.sleep(0.1)
    raise AssertionError(
        f"not {what} after {timeout} s: {stack.agent_state(NODE)}\n{stack.log_tail(f'node-{NODE}')}"
    )


@pytest.fixture(scope="module")
def edge_node(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Deployment ``agent-edge-colours`` serving, and the edge agent ``hk-edge`` started; removed afterwards
    (its agent stopped, the node forgotten, the deployment deleted) so later tests see the stack as before."""
    workdir = tmp_path_factory.mktemp("edge-agent")
    keys = stack.owner_keys("edge-owner", "edge-agents", install_admin=True)  # edge join tokens
    manage, infer = keys["manage"], keys["inference"]
    deploy_colours(stack, manage, NAME, workdir, replicas=1)
    with stack.client(manage) as api:  # an owner's edge join token, made through the API
        made = api.post("/api/v1/nodes/join-tokens", json={"region": "hk", "labels": {EDGE_LABEL: "true"}})
        assert made.status_code == 201, made.text
    stack.start_node(NODE, "hk", join_token=made.json()["join_token"],
                     args=("--edge-port", "0", "--edge-host", "127.0.0.1"))  # fmt: skip
    try:
        with stack.client(manage) as api:
            stack.wait_deployment(api, NAME)
        yield {"manage": manage, "infer": infer}
    finally:
        if f"node-{NODE}" in stack.procs:
            stack.kill(f"node-{NODE}")
        with stack.client(manage) as api, contextlib.suppress(httpx.HTTPError):
            api.delete(f"/api/v1/nodes/{NODE}")
            api.delete(f"/api/v1/deployments/{NAME}")


def edge_url(stack: Stack) -> str:
    edge = stack.agent_state(NODE).get("edge") or {}
    return f"http://127.0.0.1:{edge['port']}" if edge.get("ready") and edge.get("port") else ""


def predict(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/deployments/{NAME}/predict", content=RED, timeout=10,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "image/jpeg"})  # fmt: skip


def test_an_edge_agent_serves_through_its_edge_keeps_the_key_secret_and_restarts_a_killed_edge(
    stack: Stack, edge_node: dict
) -> None:
    wait_for(lambda: edge_url(stack), "the agent's edge ready", stack)
    # The console is told where the edge listens and that it serves (the node's inventory, in its row).
    code = f"import json; from inference.models import Node; print(json.dumps(Node.objects.get(name={NODE!r}).inventory.get('edge')))"
    told = lambda: json.loads(stack.manage("shell", "-c", code).strip().splitlines()[-1]) or {}  # noqa: E731
    wait_for(lambda: told().get("ready") is True, "the console told of the edge", stack)
    assert told()["port"] == stack.agent_state(NODE)["edge"]["port"]
    wait_for(lambda: predict(edge_url(stack), edge_node["infer"]).status_code == 200, "served", stack)
    answer = predict(edge_url(stack), edge_node["infer"])
    assert answer.status_code == 200 and answer.json()["predictions"][0]["label"] == "red"
    assert answer.headers[SERVED_BY_HEADER].startswith("hk/"), answer.headers[SERVED_BY_HEADER]
    assert predict(edge_url(stack), "lt_00000000_" + "x" * 43).status_code == 401

    pid = stack.agent_state(NODE)["edge"]["pid"]
    assert edge_pids(stack.node_dir(NODE)) == [pid]
    environ = dict(
        item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
    )
    key = environ[EDGE_KEY_ENV.encode()]
    assert len(key) > 20
    # Issue 19: the edge and the deployment's runners talk to Redis as their own ACL users, not the console's.
    prefix = stack.env["LANTAU_REDIS_PREFIX"]
    assert urlsplit(environ[b"LANTAU_REDIS_URL"].decode()).username == f"{prefix}-edge"
    assert b"LANTAU_REDIS_PASSWORD" not in environ  # the agent put it on its own URL
    connected = {c.get("user") for c in redis.Redis.from_url(stack.env["REDIS_URL"]).client_list()}
    assert {f"{prefix}-edge", f"{prefix}-runner-{NAME}"} <= connected, connected
    assert key not in Path(f"/proc/{pid}/cmdline").read_bytes()
    agent = stack.procs[f"node-{NODE}"].pid
    assert key not in Path(f"/proc/{agent}/cmdline").read_bytes()

    os.kill(pid, signal.SIGKILL)  # the edge dies: its agent starts it again
    wait_for(lambda: stack.agent_state(NODE)["edge"]["pid"] not in (None, pid) and edge_url(stack),
             "the edge restarted", stack)  # fmt: skip
    restarted = stack.agent_state(NODE)["edge"]
    assert restarted["starts"] == 2 and edge_pids(stack.node_dir(NODE)) == [restarted["pid"]]
    wait_for(lambda: predict(edge_url(stack), edge_node["infer"]).status_code == 200, "served again", stack)
    assert predict(edge_url(stack), edge_node["infer"]).headers[SERVED_BY_HEADER].startswith("hk/")

    stack.kill(f"node-{NODE}")  # a clean stop (SIGTERM) stops the edge with the agent
    assert not process_alive(restarted["pid"]) and edge_pids(stack.node_dir(NODE)) == []
    logs = (stack.logs / f"node-{NODE}.log").read_bytes()
    assert b"edge is ready" in logs and key not in logs


def test_a_node_that_joined_without_an_edge_token_gets_403(stack: Stack) -> None:
    stored = stack.node_dir("local") / "node-token"  # written when its credential was rotated
    token = stored.read_text().strip() if stored.exists() else stack.nodes["local"][1]["LANTAU_NODE_TOKEN"]
    answer = httpx.get(f"{stack.url}/api/v1/nodes/edge-config", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["type"] == "forbidden"
    assert EDGE_KEY_ENV not in answer.text
