"""``python -m bench``: EfficientNet-Lite0 (FP32 and INT8) served four ways, one JSON line per scenario.

Targets: ``raw`` (onnxruntime in-process, the ceiling), ``runner`` (the Lantau runner called
directly), ``plain`` (a one-request-per-call server over the same session options) and ``gateway``
(a full console + worker + node stack through ``/v1/``; its replica is also measured directly as
``stack-runner``), ``edge`` (``python -m inference.edge`` in front of the ``runner``, measured in
turns with it; ``bench.edge``), ``rollout`` (a version change of a two-replica deployment under a steady
load through a node agent's edge; ``bench.rollout``, its figures during the change against before it),
``scale-from-zero`` (a deployment autoscaled to zero replicas woken by a steady load; ``bench.coldstart``)
and ``fleet`` (one console answering simulated node agents' heartbeats
while the management API and pages are used; ``bench.fleet``, heartbeat figures in the common
fields). Each line holds: target, model, concurrency, requests, p50_ms, p95_ms, p99_ms,
throughput_rps, errors, mean_batch_size (and cpu_ms_per_request where known). Targets measured
together take turns in slices (see ``contenders``). Progress and a comparison with the goals go to
stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from inference.runner.config import preprocess_pool_size

from . import assets, processes
from .contenders import HttpContender, RawContender, merge
from .edge import EdgeBench, compare_with_runner
from .load import Measurement, Target, result_line
from .verdict import print_verdict

TARGETS = ("raw", "runner", "plain", "gateway", "edge", "fleet", "rollout", "scale-from-zero")
OWN_STACK = {
    "gateway",
    "fleet",
    "rollout",
    "scale-from-zero",
}  # targets that start their own console and measure no model here
FULL_COUNTS = {1: 240, 8: 480, 32: 960}
QUICK_COUNTS = {1: 8, 8: 24, 32: 64}
SLICES = 6  # short turns: background load on a shared machine changes within seconds
log = logging.getLogger("bench")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few requests per scenario (a smoke test)")
    parser.add_argument("--scenarios", default=",".join(TARGETS), help=f"comma list of {', '.join(TARGETS)}")
    parser.add_argument("--models", default="fp32,int8", help="comma list of fp32, int8")
    parser.add_argument("--concurrency", default="1,8,32", help="comma list of client counts")
    parser.add_argument(
        "--requests", type=int, default=0, help="requests per scenario (default by concurrency)"
    )
    parser.add_argument("--max-batch-size", type=int, default=8, help="the runner's (8 suits CPUs)")
    parser.add_argument("--max-queue-delay-ms", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads; 0 = all cores")
    parser.add_argument("--work-dir", type=Path, help="keep models here (reused between runs)")
    parser.add_argument("--fleet-nodes", type=int, default=200, help="simulated node agents (fleet)")
    parser.add_argument("--fleet-interval", type=float, default=2.0, help="their heartbeat interval (s)")
    parser.add_argument("--fleet-duration", type=float, default=40.0, help="the fleet's measured window (s)")
    parser.add_argument("--rollout-rps", type=float, default=0.0,
                        help="requests/s offered in all during the rollout (default 16, quick 10)")  # fmt: skip
    parser.add_argument(
        "--rollout-clients", type=int, default=0, help="clients sharing it (default 4, quick 2)"
    )
    parser.add_argument("--rollout-via", choices=("edge", "console"), default="edge",
                        help="send the rollout's load through the node agent's edge or the console's /v1/")  # fmt: skip
    args = parser.parse_args(argv)
    args.scenarios = _choices(args.scenarios, TARGETS, "--scenarios")
    args.models = _choices(args.models, ("fp32", "int8"), "--models")
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    return args


def _choices(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise SystemExit(f"{flag}: unknown {unknown or 'empty'}; choose from {', '.join(allowed)}")
    return chosen


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.bodies = assets.photo_jpegs()
        self.results: list[dict] = []

    def count(self, concurrency: int) -> int:
        if self.args.requests:
            return self.args.requests
        table = QUICK_COUNTS if self.args.quick else FULL_COUNTS
        return table.get(concurrency, (8 if self.args.quick else 30) * concurrency)

    def emit(self, line: dict) -> None:
        print(json.dumps(line), flush=True)
        self.results.append(line)

    def compare(self, model: str, contenders: list) -> None:
        """Measure the contenders in turns at each concurrency; emit one line per contender."""
        slices = 1 if self.args.quick else SLICES
        for concurrency in self.args.concurrency:
            total = self.count(concurrency)
            parts = {c.name: Measurement() for c in contenders}
            for index in range(slices):
                warmup = max(2 * concurrency, 16) if index == 0 else 0
                share = total // slices + (total % slices if index == 0 else 0)
                for contender in contenders:
                    part = contender.measure(self.bodies, concurrency=concurrency, total=share, warmup=warmup)
                    merge(parts[contender.name], part)
            lines = {
                name: result_line(name, model, concurrency, measured) for name, measured in parts.items()
            }
            if "gateway" in lines and "stack-runner" in lines:
                added = None
                if lines["gateway"]["p50_ms"] and lines["stack-runner"]["p50_ms"]:
                    added = round(lines["gateway"]["p50_ms"] - lines["stack-runner"]["p50_ms"], 3)
                lines["gateway"]["added_p50_ms"] = added
            compare_with_runner(lines)  # the edge against the runner it fronts (bench.edge)
            for line in lines.values():
                self.emit(line)

    def run_model(self, model: str, path: Path) -> None:
        """raw, runner and plain for one model, taking turns."""
        contenders: list = []
        servers: list[processes.Server] = []
        try:
            if "raw" in self.args.scenarios:
                contenders.append(
                    RawContender(path, self.args.threads, preprocess_pool_size(), quick=self.args.quick)
                )
            if "runner" in self.args.scenarios or "edge" in self.args.scenarios:
                servers.append(self._start_runner(model, path))
                contenders.append(self._contender("runner", model, servers[-1], metrics=True))
            if "edge" in self.args.scenarios:  # in front of that runner, measured in turns with it
                try:
                    edge = EdgeBench(self.logs, model, servers[0].url)
                except Exception as exc:  # no Redis, most likely: report it, keep the other figures
                    log.warning("edge scenarios skipped: %s", exc)
                    for concurrency in self.args.concurrency:
                        self.emit(result_line("edge", model, concurrency, None, skipped=str(exc)[:300]))
                else:
                    servers.append(edge)  # type: ignore[arg-type]  # stop() is all this list needs
                    contender = HttpContender("edge", edge.target(), metrics_url=servers[0].url, pid=edge.pid)
                    contenders.append(contender)
            if "plain" in self.args.scenarios:
                command = processes.plain_command(path, threads=self.args.threads)
                servers.append(processes.start(f"plain-{model}", command, self.logs))
                contenders.append(self._contender("plain", model, servers[-1], metrics=False))
            self.compare(model, contenders)
        finally:
            for server in servers:
                server.stop()
            for contender in contenders:
                if isinstance(contender, RawContender):
                    contender.close()

    def _start_runner(self, model: str, path: Path) -> processes.Server:
        folder = assets.model_dir(self.workdir, path, model, self.labels())
        command = processes.runner_command(folder, max_batch=self.args.max_batch_size,
                                           delay_ms=self.args.max_queue_delay_ms, threads=self.args.threads)  # fmt: skip
        return processes.start(f"runner-{model}", command, self.logs)

    @staticmethod
    def _contender(name: str, model: str, server: processes.Server, *, metrics: bool) -> HttpContender:
        target = Target(f"{server.url}/v1/deployments/{model}/predict", {})
        return HttpContender(
            name, target, metrics_url=server.url if metrics else None, pid=server.process.pid
        )

    @staticmethod
    def labels() -> list[str]:
        from inference.demo.efficientnet import imagenet_labels

        return imagenet_labels()


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios; exit 0 unless the benchmark itself could not run."""
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="bench: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lantau-bench-") as scratch:
        workdir = args.work_dir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        bench = Bench(args, workdir)
        models = {}
        if set(args.scenarios) - {"fleet", "rollout", "scale-from-zero"}:
            log.info("preparing models in %s", workdir)
            models = assets.prepare_models(workdir, args.models)
        if set(args.scenarios) - OWN_STACK:
            for model, path in models.items():
                log.info("raw / runner / plain: %s", model)
                bench.run_model(model, path)
        if "gateway" in args.scenarios:
            from .gateway import run_gateway

            log.info("gateway: starting a console, worker and node agent")
            run_gateway(bench, models)
        if "fleet" in args.scenarios:
            from .fleet import FleetOptions, run_fleet

            options = FleetOptions.quick() if args.quick else FleetOptions(
                nodes=args.fleet_nodes, interval_s=args.fleet_interval, duration_s=args.fleet_duration)  # fmt: skip
            log.info("fleet: %d simulated node agents against one console", options.nodes)
            run_fleet(bench, options)
        if "rollout" in args.scenarios:
            from .rollout import RolloutOptions, run_rollout

            overrides = {"via": args.rollout_via, **({"threads": args.threads} if args.threads else {}),
                         **({"rps": args.rollout_rps} if args.rollout_rps else {}),
                         **({"clients": args.rollout_clients} if args.rollout_clients else {})}  # fmt: skip
            rollout = RolloutOptions.quick_run(**overrides) if args.quick else RolloutOptions(**overrides)
            log.info(
                "rollout: %d replicas, %.0f requests/s through the %s",
                rollout.replicas,
                rollout.rps,
                rollout.via,
            )
            run_rollout(bench, rollout)
        if "scale-from-zero" in args.scenarios:
            from .coldstart import run_coldstart_stack

            log.info("scale from zero: a deployment at zero replicas takes a steady load")
            bench.emit(run_coldstart_stack(bench.workdir, quick=args.quick))
        print_verdict(bench.results)
    log.info("done in %.0f s", time.monotonic() - started)
    return 0
