"""The sandbox that loads untrusted models: what code inside it can see, reach and use (review finding H3).

These run the real child process (``python -m inference.sandbox.child``) with the worker's secrets in
the parent's environment, and ask the child's ``confinement`` task what it can read and reach.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from inference.conversion.steps import JobCancelled
from inference.sandbox import Sandbox, SandboxFailed, SandboxLimits
from inference.sandbox.box import scrub

SECRET = "s3-sandbox-secret-value-0123456789"
DB_PASSWORD = "pg-password-987654321"
ROOT_ONLY = os.geteuid() == 0


@pytest.fixture
def secrets_in_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SECRET_KEY", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgres://lantau:{DB_PASSWORD}@127.0.0.1:5432/lantau")
    monkeypatch.setenv("LANTAU_KEY_PEPPER", SECRET + "-pepper")
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o600)
    return secret_file


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    yield server.getsockname()[1]
    server.close()


def confinement(limits: SandboxLimits | None = None, **args) -> tuple[dict, list[str]]:
    notes: list[str] = []
    with Sandbox(limits or SandboxLimits(), note=notes.append) as box:
        return box.call("confinement", args), notes


def test_code_in_the_sandbox_sees_no_secret_and_reaches_no_network(secrets_in_env, listener):
    seen, notes = confinement(paths=[str(secrets_in_env)], connect=[["127.0.0.1", listener]])
    assert SECRET not in repr(seen) and DB_PASSWORD not in repr(seen)
    assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "LANTAU_KEY_PEPPER"} & set(seen["environ"])
    assert set(seen["environ"]) <= {
        "PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME",
        "MPLCONFIGDIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONDONTWRITEBYTECODE",
        "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    }  # fmt: skip
    assert seen["connect"][f"127.0.0.1:{listener}"].startswith("refused")
    assert not any(SECRET in line for line in notes)


@pytest.mark.skipif(not ROOT_ONLY, reason="dropping to another user needs root")
def test_as_root_the_child_runs_as_nobody_and_cannot_read_the_workers_files(secrets_in_env):
    seen, _ = confinement(paths=[str(secrets_in_env)])
    assert seen["uid"] != 0
    assert seen["files"][str(secrets_in_env)].startswith("refused")
    for proc in ("/proc/self/environ", "/proc/1/environ", f"/proc/{os.getpid()}/environ"):
        assert SECRET not in seen["files"][proc]


def test_memory_exhaustion_fails_the_call_with_the_limit_in_the_message():
    with pytest.raises(SandboxFailed, match="exhausted the 512 MiB memory limit"):
        confinement(SandboxLimits(memory_bytes=512 * 1024**2), allocate_bytes=1024**3)


def test_a_child_past_its_wall_clock_limit_is_stopped():
    with pytest.raises(SandboxFailed, match="took longer than 0.5 s"):
        confinement(SandboxLimits(timeout_s=0.5), sleep_s=60)


def test_cancelling_kills_the_child_and_raises_job_cancelled():
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 2

    with Sandbox(SandboxLimits()) as box, pytest.raises(JobCancelled):
        box.call("confinement", {"sleep_s": 60}, cancelled=cancelled)


def test_an_unknown_task_is_refused_by_the_child():
    with Sandbox(SandboxLimits()) as box, pytest.raises(SandboxFailed, match="KeyError"):
        box.call("os.system", {})


def test_outputs_planted_as_links_are_not_followed(tmp_path):
    with Sandbox(SandboxLimits()) as box:
        (box.out / "model.onnx").symlink_to("/etc/passwd")
        with pytest.raises(SandboxFailed, match="did not write model.onnx"):
            box.take("model.onnx", tmp_path / "model.onnx")
        assert not (tmp_path / "model.onnx").exists()


@pytest.mark.skipif(not ROOT_ONLY, reason="ownership needs root")
def test_inputs_are_read_only_copies_the_child_cannot_change(tmp_path):
    source = tmp_path / "model.onnx"
    source.write_bytes(b"weights")
    with Sandbox(SandboxLimits()) as box:
        copy = box.put("model", source)
        mode = copy.stat()
        assert copy.read_bytes() == b"weights" and mode.st_uid == 0
        assert stat.S_IMODE(mode.st_mode) == 0o440
        assert stat.S_IMODE(box.root.stat().st_mode) == 0o750
    assert not box.root.exists()


def test_log_lines_are_scrubbed_of_the_workers_secrets(secrets_in_env):
    line = f"loading failed: key={SECRET} db=postgres://lantau:{DB_PASSWORD}@db/lantau"
    cleaned = scrub(line)
    assert SECRET not in cleaned and DB_PASSWORD not in cleaned and "***" in cleaned


def test_the_sandbox_folder_is_removed_after_use():
    with Sandbox(SandboxLimits()) as box:
        root = Path(box.root)
        box.call("confinement", {})
    assert not root.exists()
