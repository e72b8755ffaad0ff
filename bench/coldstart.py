"""The scale-from-zero target: a deployment autoscaled down to no replica takes a steady load.

On a real stack (console, worker with beat, one node agent, real runners; ``tests.support.stack``), the
colour classifier is deployed, given autoscaling with ``min_replicas`` 0 and left idle until it is at
zero. Then ``clients`` threads send requests back to back through the console's ``/v1/`` for
``duration_s``: the first ones are held while the worker wakes the deployment and the agent starts a
runner (``inference.edge.dispatch``), the rest are served as usual. One JSON line: requests, errors
(anything but 200), ``cold_start_ms`` (the first answer's latency: the wait for a replica),
``p50_ms``/``p99_ms`` over the whole change and ``warm_p50_ms`` over the answers after the first
second of service, and ``back_to_zero_s`` (how long after the load stopped the deployment was at zero
again; ``scale_to_zero_after_s`` plus the autoscaler's period).

``run_coldstart`` takes a started ``Stack``: ``python -m bench --scenarios scale-from-zero`` starts one;
the suite passes its own.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from inference.runner.metrics import percentile
from tests.support.deployments import deploy_colours
from tests.support.factories import image_bytes
from tests.support.stack import Stack

log = logging.getLogger("bench.coldstart")
TARGET = "scale-from-zero"


@dataclass(frozen=True)
class ColdStartOptions:
    clients: int = 4
    duration_s: float = 20.0
    idle_s: int = 3  # the deployment's scale_to_zero_after_s
    name: str = "coldstart"

    @classmethod
    def quick(cls) -> ColdStartOptions:
        return cls(clients=2, duration_s=4.0, idle_s=2)


def _wait(check, what: str, timeout: float) -> float:
    """Seconds until ``check()`` holds; RuntimeError past ``timeout``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not reached within {timeout:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def run_coldstart(stack, workdir: Path, options: ColdStartOptions, manage: str, infer: str) -> dict:
    """Measure one wake-up from zero under load; the result line (``stack`` started, keys given)."""
    name = options.name
    deploy_colours(stack, manage, name, workdir, replicas=1)
    body = image_bytes((250, 10, 10))
    with stack.client(manage) as api:
        stack.wait_deployment(api, name)
        scaling = {"min_replicas": 0, "max_replicas": 1, "scale_cooldown_s": 0,
                   "scale_to_zero_after_s": options.idle_s}  # fmt: skip
        answer = api.put(f"/api/v1/deployments/{name}/autoscaling", json=scaling)
        answer.raise_for_status()

        def at_zero() -> bool:
            shown = api.get(f"/api/v1/deployments/{name}").json()
            return (
                shown["replicas"] == 0 and shown["replica_set"] == [] and shown["status"] == "scaled to zero"
            )

        _wait(at_zero, "scaled to zero before the load", 120)
        answers: list[tuple[float, float, int]] = []  # (sent at, latency s, status)
        stop_at = time.monotonic() + options.duration_s

        def client_loop() -> None:
            with stack.client(infer) as client:
                while time.monotonic() < stop_at and len(answers) < 100_000:  # bounded
                    sent = time.monotonic()
                    try:
                        status = client.post(f"/v1/deployments/{name}/predict", content=body,
                                             headers={"Content-Type": "image/jpeg"}, timeout=180).status_code  # fmt: skip
                    except httpx.HTTPError:
                        status = 0
                    answers.append((sent, time.monotonic() - sent, status))

        began = time.monotonic()
        threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(options.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(options.duration_s + 200)
        ended = time.monotonic()
        back = _wait(at_zero, "back to zero after the load", 120 + options.idle_s)
        decisions = api.get(f"/api/v1/deployments/{name}").json()["autoscaling"]["decisions"]
        api.delete(f"/api/v1/deployments/{name}")
    latencies = sorted(latency * 1000 for _, latency, status in answers if status == 200)
    first_done = min((sent + latency for sent, latency, status in answers if status == 200), default=ended)
    warm = sorted(
        latency * 1000 for sent, latency, status in answers if status == 200 and sent >= first_done + 1
    )
    result = {
        "target": TARGET,
        "model": "colours",
        "concurrency": options.clients,
        "requests": len(answers),
        "errors": sum(1 for *_, status in answers if status != 200),
        "cold_start_ms": round((first_done - began) * 1000, 1),
        "p50_ms": round(percentile(latencies, 0.5), 3) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99), 3) if latencies else None,
        "warm_p50_ms": round(percentile(warm, 0.5), 3) if warm else None,
        "throughput_rps": round(len(latencies) / max(1e-9, ended - began), 1),
        "back_to_zero_s": round(back, 1),
        "woken_by": [d["reason"] for d in decisions if d["from"] == 0],
    }
    log.info("scale from zero: %s", result)
    return result


def run_coldstart_stack(workdir: Path, *, quick: bool) -> dict:
    """``python -m bench --scenarios scale-from-zero``: a stack of its own (console, worker, one hk node)."""
    stack = Stack(workdir / "coldstart-stack")
    try:
        stack.start()
        stack.start_node("local", "hk")
        stack.user("bench", "bench", "owner")
        manage, infer = stack.api_key("bench", "manage"), stack.api_key("bench", "inference")
        options = ColdStartOptions.quick() if quick else ColdStartOptions()
        return run_coldstart(stack, workdir, options, manage, infer)
    except Exception as exc:  # report it in the line, keep the other scenarios' figures
        log.warning("scale from zero failed: %s", exc)
        return {"target": TARGET, "model": "colours", "concurrency": 0, "skipped": str(exc)[:300]}
    finally:
        stack.stop()
