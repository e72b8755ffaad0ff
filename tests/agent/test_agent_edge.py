"""The agent's edge supervision (``inference.agent.edge``) with a real edge process and no console: the
configuration the console would hand out is given by a function, made like ``bench.edge`` makes it.

* The edge's secrets reach it in its environment only: not on its command line, not in the record
  file; only ``LANTAU_*`` variables of the console's answer are kept.
* An agent that restarts adopts the edge left running when it runs the same configuration, and stops it
  for a new one; a node the console refuses runs no edge, and the one left running is stopped.
(The restart of a killed edge by a real agent is in ``tests/edge/test_edge_agent_e2e.py``.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.redis_keys import PREFIX_ENV
from contract.routes import EDGE_KEY_ENV, edge_key_text
from contract.signing import public_key_text, signing_key_from_secret
from inference.agent import edge as agent_edge
from inference.agent.supervisor import Policy, process_alive
from tests.support.stack import edge_pids

FAST = Policy(probe_timeout_s=0.5, hang_probes=2, start_timeout_s=60, backoff_s=0.2)


def configuration(prefix: str = "agent-edge-test") -> dict[str, str]:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    return {EDGE_KEY_ENV: edge_key_text(os.urandom(32)), "LANTAU_KEY_VERIFY_KEY":
            public_key_text(signing_key_from_secret(os.urandom(32))), "LANTAU_REDIS_URL": redis_url,
            PREFIX_ENV: prefix}  # fmt: skip


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "node"
    folder.mkdir()
    yield folder
    for pid in edge_pids(folder):  # whatever a test left running
        os.killpg(pid, signal.SIGKILL)


def supervise(data_dir: Path, fetch: Callable[[], dict[str, str]]) -> agent_edge.EdgeSupervisor:
    return agent_edge.EdgeSupervisor(data_dir, region="hk", host="127.0.0.1", port=0, fetch=fetch,
                                     policy=FAST, echo=False)  # fmt: skip


def until(edge: agent_edge.EdgeSupervisor, check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        edge.tick()
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"condition not reached: {edge.state()}")


def test_only_lantau_variables_of_the_consoles_answer_reach_the_edge() -> None:
    given = {**configuration(), "LD_PRELOAD": "/tmp/evil.so", "PATH": "/tmp", "LANTAU_X": 3}
    kept = agent_edge.edge_environment(given)  # LANTAU_X is no string: dropped too
    assert kept == {k: v for k, v in given.items() if k in agent_edge.REQUIRED_ENV}
    with pytest.raises(agent_edge.EdgeUnavailable, match=EDGE_KEY_ENV) as refused:
        agent_edge.edge_environment({k: v for k, v in given.items() if k != EDGE_KEY_ENV})
    assert given["LANTAU_KEY_VERIFY_KEY"] not in str(refused.value)  # names only, never values


def test_an_edge_is_adopted_by_the_next_agent_with_the_same_configuration_and_stopped_otherwise(
    data_dir: Path,
) -> None:
    config = configuration()
    first = supervise(data_dir, lambda: config)
    until(first, lambda: first.ready)
    pid = first.state()["pid"]
    assert edge_pids(data_dir) == [pid]
    command = Path(f"/proc/{pid}/cmdline").read_bytes()
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    record = (data_dir / agent_edge.RECORD_FILE).read_text()
    for secret in (config[EDGE_KEY_ENV], config["LANTAU_REDIS_URL"]):
        assert secret.encode() not in command and secret not in record
    assert f"{EDGE_KEY_ENV}={config[EDGE_KEY_ENV]}".encode() in environ.split(b"\0")

    # The agent is killed (its watcher ends, the edge does not): the next one adopts the same process.
    second = supervise(data_dir, lambda: config)
    until(second, lambda: second.ready)
    assert (second.state()["pid"], second.adopted, second.starts) == (pid, True, 0)

    # The console hands out another configuration (a new edge key): the next agent replaces the edge.
    third = supervise(data_dir, configuration)
    until(third, lambda: third.ready)
    assert third.state()["pid"] != pid and third.starts == 1 and not process_alive(pid)
    third.stop()
    assert edge_pids(data_dir) == [] and not (data_dir / agent_edge.RECORD_FILE).exists()


def test_a_node_the_console_refuses_runs_no_edge_and_stops_the_one_left(data_dir: Path) -> None:
    config = configuration()
    first = supervise(data_dir, lambda: config)
    until(first, lambda: first.ready)
    pid = first.state()["pid"]

    def refuse() -> dict[str, str]:
        raise agent_edge.EdgeRefused("node 'hk-1' may not run an edge")

    refused = supervise(data_dir, refuse)
    for _ in range(3):
        refused.tick()
    assert refused.state()["pid"] is None and "may not run an edge" in refused.state()["error"]
    assert not process_alive(pid) and edge_pids(data_dir) == []


def test_the_edge_port_and_host_may_come_from_the_environment(monkeypatch, tmp_path: Path) -> None:
    """For docker/compose.node.yaml: an edge node is configured in node.env, like its secrets."""
    from inference.agent.main import parse_args

    monkeypatch.setenv("LANTAU_NODE_TOKEN", "ltn_env")
    base = ["--console", "http://127.0.0.1:1", "--region", "hk", "--data-dir", str(tmp_path)]
    monkeypatch.delenv("LANTAU_EDGE_PORT", raising=False)
    monkeypatch.delenv("LANTAU_EDGE_HOST", raising=False)
    assert (parse_args(base).edge_port, parse_args(base).edge_host) == (None, "0.0.0.0")  # no edge
    monkeypatch.setenv("LANTAU_EDGE_PORT", "8080")
    monkeypatch.setenv("LANTAU_EDGE_HOST", "127.0.0.1")
    assert (parse_args(base).edge_port, parse_args(base).edge_host) == (8080, "127.0.0.1")
    assert parse_args([*base, "--edge-port", "0"]).edge_port == 0  # the flag wins
    monkeypatch.setenv("LANTAU_EDGE_PORT", "99999")
    with pytest.raises(SystemExit):
        parse_args(base)  # checked like the flag
