"""Secrets stay off command lines and out of runners (review findings M2, M3, M4, L1, L2).

* A runner started by the node agent's own code holds no SECRET_KEY or DATABASE_URL in its environment
  (read back from /proc/<pid>/environ) and no password on its command line (/proc/<pid>/cmdline).
* The agent reads its token and Redis URL from the environment or a 0600 file; the quick start and the
  compose files pass neither on a command line; runners bind the advertised address, not every interface.
* A node may report replica URLs only on its own advertised host, and the agent sends its token only to
  paths on the console.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml
from django.test import Client

from inference.agent import artifacts, supervisor
from inference.agent.main import parse_args
from inference.models import Replica
from inference.runner import launch
from inference.services.nodes import desired_for, node_token_create
from tests.security.dataplane import colour_deployment
from tests.support.runners import REPO, image_manifest, write_manifest
from tests.support.tiny_models import colour_classifier

SECRET_KEY = "django-secret-that-must-stay-home"
DATABASE_URL = "postgres://postgres:pg-password-42@127.0.0.1:5432/lantau"
REDIS_PASSWORD = "redis-password-77"


def proc_strings(pid: int, name: str) -> list[str]:
    return Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace").split("\0")


@pytest.fixture
def colour_model_dir(tmp_path: Path) -> Path:
    colour_classifier(tmp_path / "model.onnx")
    return write_manifest(tmp_path, image_manifest())


def test_a_runner_started_by_the_agent_inherits_no_console_secret(monkeypatch, colour_model_dir) -> None:
    monkeypatch.setenv("SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)
    monkeypatch.setenv("REDIS_URL", f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0")
    monkeypatch.setenv("LANTAU_NODE_TOKEN", "ltn_node-token-secret")
    monkeypatch.chdir(REPO)
    desired = {"id": 7, "runner_token": "runner-token-7", "batching": {"max_batch_size": 4, "max_queue_delay_ms": 2},
               "limits": {"max_json_depth": 16, "max_body_bytes": 65536, "unknown": 3, "max_inputs": "9"}}  # fmt: skip
    redis_url = (
        f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0"  # nothing listens there: Redis errors are logged only
    )
    runners = supervisor.Supervisor(colour_model_dir / "node", threads=1, redis_url=redis_url, echo=False)
    replica = runners.ensure(desired, colour_model_dir)
    try:
        assert replica.record is not None
        environ = proc_strings(replica.record.pid, "environ")
        cmdline = proc_strings(replica.record.pid, "cmdline")
        names = {entry.split("=", 1)[0] for entry in environ if entry}
        assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "LANTAU_NODE_TOKEN"}.isdisjoint(names)
        assert not any(SECRET_KEY in e or "pg-password" in e for e in environ)
        assert f"LANTAU_REDIS_URL={redis_url}" in environ and "LANTAU_RUNNER_TOKEN=runner-token-7" in environ
        assert not any(REDIS_PASSWORD in arg or "runner-token-7" in arg for arg in cmdline)
        # The console's limits travel as flags; unknown or malformed ones are left out.
        assert cmdline[cmdline.index("--max-json-depth") + 1] == "16" and "--max-inputs" not in cmdline
        assert cmdline[cmdline.index("--host") + 1] == "127.0.0.1"
        deadline = time.monotonic() + 60
        while replica.port is None and replica.record is not None and time.monotonic() < deadline:
            runners.tick()  # the agent finds the port in the runner's log
            time.sleep(0.1)
        assert replica.port
    finally:
        runners.stop_all()


def test_the_agent_reads_its_token_from_a_0600_file_or_the_environment(
    tmp_path, monkeypatch, caplog, capsys
) -> None:
    monkeypatch.delenv("LANTAU_NODE_TOKEN", raising=False)
    monkeypatch.delenv("LANTAU_REDIS_URL", raising=False)
    base = ["--console", "http://c", "--region", "hk", "--advertise-host", "10.8.0.12"]
    token_file = tmp_path / "node.token"
    token_file.write_text("ltn_from-file\n")
    token_file.chmod(0o600)
    redis_file = tmp_path / "redis.url"
    redis_file.write_text(f"redis://:{REDIS_PASSWORD}@10.8.0.1:6379/0\n")
    redis_file.chmod(0o600)
    args = parse_args([*base, "--token-file", str(token_file), "--redis-url-file", str(redis_file)])
    assert args.node_token == "ltn_from-file" and args.redis == f"redis://:{REDIS_PASSWORD}@10.8.0.1:6379/0"
    assert args.bind_host == "10.8.0.12"  # runners listen where the gateway connects, not on 0.0.0.0

    token_file.chmod(0o644)
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*base, "--token-file", str(token_file)])
    assert exit_info.value.code == 2

    monkeypatch.setenv("LANTAU_NODE_TOKEN", "ltn_from-env")
    assert parse_args(base).node_token == "ltn_from-env"
    monkeypatch.delenv("LANTAU_NODE_TOKEN")
    with pytest.raises(SystemExit):
        parse_args(base)  # no token anywhere

    for flag, value in (
        ("--token", "ltn_old-style"),
        ("--redis-url", f"redis://:{REDIS_PASSWORD}@10.8.0.1/0"),
    ):
        monkeypatch.setenv("LANTAU_NODE_TOKEN", "ltn_from-env")  # even beside a good secret: refused, named
        with pytest.raises(SystemExit):
            parse_args([*base, flag, value])
        said = capsys.readouterr().err
        assert f"{flag} is refused" in said and f"{flag}-file" in said and value not in said + caplog.text


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart", REPO / "scripts" / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quick_start_puts_no_secret_on_a_command_line(tmp_path) -> None:
    quickstart = _quickstart()
    commands = quickstart.child_commands(8000, tmp_path)
    for command in commands.values():
        assert not any(flag in command for flag in ("--token", "--redis-url"))
    env = {"PATH": "/usr/bin", "SECRET_KEY": SECRET_KEY, "DATABASE_URL": DATABASE_URL,
           "REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0"}  # fmt: skip
    node = quickstart.node_env(env, "ltn_quick")
    assert node["LANTAU_NODE_TOKEN"] == "ltn_quick" and REDIS_PASSWORD in node["LANTAU_REDIS_URL"]
    assert "SECRET_KEY" not in node and "DATABASE_URL" not in node


def test_compose_files_keep_secrets_out_of_commands_and_runners_off_public_interfaces() -> None:
    for name in ("compose.yaml", "compose.node.yaml"):
        node = yaml.safe_load((REPO / "docker" / name).read_text())["services"]["node"]
        command = node["command"] if isinstance(node["command"], str) else " ".join(node["command"])
        assert "--token" not in command and "TOKEN" not in command and "--redis-url" not in command
        assert "0.0.0.0" not in command and "--bind-host" not in command
        # The token reaches the agent through its environment: an env file (kept out of git) or a variable.
        env_files = [f["path"] if isinstance(f, dict) else f for f in node.get("env_file", [])]
        assert "LANTAU_NODE_TOKEN" in node.get("environment", {}) or "node.env" in env_files
        assert "SECRET_KEY" not in node.get("environment", {}) and "DATABASE_URL" not in node.get(
            "environment", {}
        )


@pytest.mark.parametrize(
    "url", ["http://evil.example/x", "//evil.example/x", "https://console.example/a", "x/y"]
)
def test_the_agent_sends_its_token_only_to_paths_on_the_console(tmp_path, url: str) -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: seen.append(request) or httpx.Response(200, content=b""))
    client = httpx.Client(
        base_url="http://console.test", headers={"Authorization": "Bearer ltn_x"}, transport=transport
    )
    desired = {"id": 1, "version_id": 1, "manifest": {}, "artifacts": [{"filename": "model.onnx", "sha256": "0" * 64, "url": url}]}  # fmt: skip
    with pytest.raises(artifacts.ArtifactError, match="only paths on the console"):
        artifacts.prepare(client, tmp_path, desired)
    assert seen == []  # refused before any request carried the token


@pytest.mark.django_db
def test_a_node_cannot_point_a_replica_at_another_host(owner, team, tmp_path) -> None:
    replica = colour_deployment(team, owner, tmp_path)
    node = replica.node
    _, token = node_token_create(name=node.name, region=node.region)  # rotate: we need the clear token

    def beat(url: str, advertise_host: str = "127.0.0.1") -> None:
        body = {"region": node.region, "inventory": {"cpus": 2, "advertise_host": advertise_host},
                "replicas": [{"id": replica.pk, "state": "ready", "url": url}]}  # fmt: skip
        response = Client().post("/api/v1/nodes/heartbeat", body, content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
        assert response.status_code == 200, response.content

    beat("http://10.0.0.5:9200")
    assert Replica.objects.get(pk=replica.pk).url == ""  # refused: not on the node's advertised host
    beat("http://127.0.0.1:9200/../admin")
    assert Replica.objects.get(pk=replica.pk).url == ""
    beat("http://10.0.0.5:9200", advertise_host="10.0.0.5")  # the host pinned at the first heartbeat stays
    assert Replica.objects.get(pk=replica.pk).url == ""
    beat("http://127.0.0.1:9200")
    assert Replica.objects.get(pk=replica.pk).url == "http://127.0.0.1:9200"
    assert desired_for(node)[0]["limits"]["max_json_depth"] == 32


def test_runner_env_keeps_only_the_allowlist() -> None:
    base = {
        "PATH": "/bin",
        "LC_ALL": "C.UTF-8",
        "SECRET_KEY": "s",
        "DATABASE_URL": "d",
        "AWS_SECRET_ACCESS_KEY": "a",
    }
    env = launch.runner_env(token="t", base=base)
    assert set(env) == {"PATH", "LC_ALL", "LANTAU_RUNNER_TOKEN", "PYTHONUNBUFFERED"}
    assert os.environ.get("SECRET_KEY") is None or "SECRET_KEY" not in launch.runner_env()
