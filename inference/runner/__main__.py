"""Entry point: ``python -m inference.runner --model-dir DIR --port N``.

Order of events: validate arguments and manifest (exit 2 on failure, before listening), listen
and print the listening line (``contract.listening``), load the ONNX session once and warm it up in a
thread (``/healthz`` answers meanwhile), then mark ready. SIGTERM/SIGINT drain the queue and exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys

from aiohttp import web

from contract.listening import format_listening

from .app import STATE, State, create_app
from .batcher import Batcher
from .config import TEXT_GENERATION, Manifest, RunnerConfig, load_manifest, parse_args
from .engine import Engine
from .errors import ConfigError
from .generation.pipeline import load_text_generation
from .metrics import Metrics
from .pipelines import build_pipeline

log = logging.getLogger("lantau.runner")
DRAIN_TIMEOUT_S = 30.0


def bind_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def load_model(state: State) -> Batcher:
    """Blocking: build the session and pipeline, warm up at batch 1 and max batch; return a batcher."""
    config, manifest = state.config, state.manifest
    if manifest.task == TEXT_GENERATION:
        return load_text_generation(state)  # type: ignore[return-value]  # a scheduler with the batcher lifecycle
    engine = Engine(
        manifest.model_path,
        config.threads,
        config.spinning,
        device=config.device,
        trt_cache_dir=config.trt_cache_dir,
    )
    pipeline = build_pipeline(manifest, engine, config.limits.image_pixels)
    max_batch = min(config.max_batch_size, pipeline.fixed_batch or config.max_batch_size)
    pipeline.warmup(max_batch)
    state.pipeline = pipeline
    return Batcher(
        pipeline.run_batch,
        max_batch_size=max_batch,
        max_delay_s=config.max_queue_delay_ms / 1000.0,
        max_queue=config.max_queue,
        metrics=state.metrics,
        max_wait_s=config.max_queue_wait_ms / 1000.0,
    )


async def _drain(state: State) -> None:
    state.draining = True
    deadline = asyncio.get_running_loop().time() + DRAIN_TIMEOUT_S
    while (
        state.batcher is not None and not state.batcher.idle and asyncio.get_running_loop().time() < deadline
    ):
        await asyncio.sleep(0.01)


async def serve(config: RunnerConfig, manifest: Manifest) -> int:
    """Run the runner until a signal arrives; return the process exit code."""
    app = create_app(config, manifest, Metrics(manifest.deployment, manifest.model_version))
    state = app[STATE]
    runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        sock = bind_socket(config.host, config.port)
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, exc.strerror or exc)
        await runner.cleanup()
        return 1
    await web.SockSite(runner, sock).start()
    state.edge.listening_on(sock.getsockname()[1])
    print(format_listening(sock.getsockname()[1]), flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    code = 0
    try:
        loading = asyncio.ensure_future(asyncio.to_thread(load_model, state))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            try:
                batcher = loading.result()
            except ConfigError as exc:
                print(f"lantau-runner: {exc}", file=sys.stderr, flush=True)
                return 2
            batcher.start()
            state.batcher = batcher
            log.info(
                "ready: %s (%s) on port %d",
                manifest.deployment,
                manifest.model_version,
                sock.getsockname()[1],
            )
            await stopping
        stopping.cancel()
        log.info("stopping: draining the queue")
        await _drain(state)
    except Exception:
        log.exception("runner failed")
        code = 1
    finally:
        await runner.cleanup()
        if state.batcher is not None:
            await state.batcher.stop()
        state.preprocess_pool.shutdown(wait=False, cancel_futures=True)
    return code


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = parse_args(argv)
        manifest = load_manifest(config.model_dir)
    except ConfigError as exc:
        print(f"lantau-runner: {exc}", file=sys.stderr, flush=True)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(config, manifest))
    return 130


if __name__ == "__main__":
    sys.exit(main())
