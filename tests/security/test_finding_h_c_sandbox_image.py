"""H-C: where the sandbox cannot isolate (the shipped image's non-root worker), model jobs fail closed.

This machine runs as root, so the image's worker is simulated: a process drops to ``nobody`` (in a
mount namespace that keeps the interpreter reachable, as the sandbox child does) and then does what a
worker does before a model job: probe the sandbox and ask whether the step may run. As root, the job's
sandbox child runs isolated: another uid, a network namespace.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from inference.jobs.versions import sandbox_isolation_required
from inference.sandbox import Sandbox, SandboxLimits, isolation, isolation_refusal

ROOT = Path(__file__).resolve().parents[2]
AS_WORKER = """
import json, os, sys, tempfile
from pathlib import Path
from inference.sandbox.child import expose_runtime
box = Path(tempfile.mkdtemp())
expose_runtime(box)
os.setgroups([]); os.setgid({gid}); os.setuid({uid})
from inference.sandbox import isolation, isolation_refusal
found = isolation()
import django
django.setup()
from inference.jobs.versions import sandbox
from inference.sandbox import SandboxFailed
notes = []
reporter = type("Reporter", (), {{"note": staticmethod(notes.append)}})()
try:
    with sandbox(reporter):  # what every model job step (import, export, conversion) enters first
        job = "ran"
except SandboxFailed as exc:
    job = "refused: " + str(exc)
print(json.dumps({{"uid": os.getuid(), "found": found, "refusal": isolation_refusal(found), "job": job,
                  "notes": notes}}))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulating the image's worker needs root")


def as_unprivileged_worker(**env: str) -> dict:
    nobody = pwd.getpwnam("nobody")
    code = AS_WORKER.format(uid=nobody.pw_uid, gid=nobody.pw_gid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "SECRET_KEY": "test-x",
           "DJANGO_SETTINGS_MODULE": "console.settings", "LANTAU_DATA_DIR": tempfile.mkdtemp(), **env}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_non_root_worker_refuses_model_jobs_with_the_reason():
    seen = as_unprivileged_worker()
    assert seen["uid"] == pwd.getpwnam("nobody").pw_uid
    assert seen["found"]["root"] is False
    refusal = seen["refusal"]
    assert refusal.startswith("the sandbox cannot isolate here: it cannot drop to another uid")
    assert "run the worker as root with CAP_SETUID/CAP_SETGID" in refusal
    assert "set LANTAU_SANDBOX_UNSAFE=1 to accept the risk" in refusal


def test_a_non_root_worker_refuses_the_job_step_unless_the_operator_accepts_the_risk():
    refused = as_unprivileged_worker()
    assert refused["job"].startswith(
        "refused: the sandbox cannot isolate here: it cannot drop to another uid"
    )
    accepted = as_unprivileged_worker(LANTAU_SANDBOX_UNSAFE="1")
    assert accepted["job"] == "ran"
    assert "WARNING, running without isolation" in accepted["notes"][0]
    in_development = as_unprivileged_worker(LANTAU_DEBUG="1")  # a non-root dev run works, loudly
    assert in_development["job"] == "ran" and in_development["notes"]


def test_as_root_the_job_runs_isolated_as_another_uid_in_a_network_namespace():
    assert isolation_refusal(isolation()) is None
    assert sandbox_isolation_required()  # the tests' settings: not DEBUG, so the default fails closed
    with socket.create_server(("127.0.0.1", 0)) as listener:  # reachable from this network namespace
        port = listener.getsockname()[1]
        with Sandbox(SandboxLimits(memory_bytes=1024**3, cpu_seconds=60, timeout_s=60)) as box:
            found = box.call("confinement", {"connect": [["127.0.0.1", port]]})
    assert found["uid"] != os.getuid() and found["uid"] == pwd.getpwnam("nobody").pw_uid
    assert found["connect"][f"127.0.0.1:{port}"].startswith("refused"), found["connect"]


@pytest.mark.django_db
def test_readyz_shows_each_workers_sandbox_state(client, settings):
    import socket as sockets

    from accounts import keycache
    from console.celery import sandbox_state
    from contract.redis_keys import RedisKeys

    key = RedisKeys(settings.REDIS_PREFIX).sandbox_workers()
    keycache.client().delete(key)
    sandbox_state()  # what the worker does once it is ready
    body = client.get("/readyz").json()
    assert body["status"] == "ready"
    assert body["sandbox"][sockets.gethostname()] == {"isolated": True, "model_jobs": "run", "reason": None}
    keycache.client().hset(key, "image-worker", json.dumps({"isolated": False, "model_jobs": "refused",
                                                           "reason": "the sandbox cannot isolate here: x"}))  # fmt: skip
    assert client.get("/readyz").json()["sandbox"]["image-worker"]["model_jobs"] == "refused"
    keycache.client().delete(key)
