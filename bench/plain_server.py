"""The baseline: a plain one-request-per-call server over the same onnxruntime session options.

What a typical FastAPI service does, written with aiohttp (no extra dependency): a synchronous
``predict`` (decode, pre-process, ``session.run`` on one image, softmax, top-5) run in a thread pool of
Python's default size, no batching and no queue. ``python -m bench.plain_server --model M --port 0``
prints the listening line (``contract.listening``) like the runner does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from aiohttp import web

from contract.listening import format_listening
from inference.demo.efficientnet import imagenet_labels
from inference.runner.engine import Engine
from inference.runner.postprocess import softmax, top_k
from inference.runner.preprocess import ImagePreprocessor

from .assets import preprocessing


class PlainModel:
    def __init__(self, model_path: Path, threads: int) -> None:
        self.engine = Engine(model_path, threads)
        self.input_name = self.engine.inputs[0].name
        self.prepare = ImagePreprocessor(preprocessing())
        self.labels = imagenet_labels()

    def predict(self, body: bytes) -> dict:
        array = self.prepare(body)
        scores = softmax(self.engine.run({self.input_name: array[np.newaxis]})[0])[0]
        predictions = [{"label": self.labels[i], "index": i, "score": s} for i, s in top_k(scores, 5)]
        return {"predictions": predictions}


def create_app(model: PlainModel) -> web.Application:
    pool = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4))  # Python's (and Starlette's) default

    async def predict(request: web.Request) -> web.Response:
        body = await request.read()
        answer = await asyncio.get_running_loop().run_in_executor(pool, model.predict, body)
        return web.json_response(answer)

    async def readyz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    app = web.Application(client_max_size=10 * 1024 * 1024)
    app.router.add_post("/v1/deployments/{name}/predict", predict)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(model_path: Path, port: int, threads: int) -> None:
    app = create_app(PlainModel(model_path, threads))
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    print(format_listening(bound), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_server")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.model, args.port, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
