"""The only functions the sandbox child runs, by name: each takes JSON arguments and returns JSON.

Everything that parses, loads or executes an uploaded model goes through here: the import check, the
export to ONNX (TorchScript and Hugging Face loading), conversions, evaluation and benchmarks. Imported
by the child after it is confined, never by the worker.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference.conversion.benchmark import benchmark, compare_latency
from inference.conversion.evaluate import evaluate
from inference.conversion.export import export_onnx
from inference.conversion.graph import convert_fp16, optimize_graph
from inference.conversion.quantize import quantize_dynamic_int8, quantize_static_int8
from inference.conversion.steps import Progress
from inference.conversion.tuning import TuningRun, parse_targets, tune
from inference.conversion.weight_only import quantize_and_compare
from inference.validation.formats import InvalidModel, sniff
from inference.validation.onnx_model import check_task, inspect_onnx

Args = dict[str, Any]


def scaled(progress: Progress, low: float, high: float) -> Progress:
    return lambda percent, message: progress(low + (high - low) * percent / 100, message)


def as_json(value: object) -> dict[str, Any]:
    """Paths and numpy numbers as plain JSON values (what the parent reads back)."""
    plain: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return plain


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def check_upload(args: Args, progress: Progress) -> dict[str, Any]:
    """Sniff an unpacked upload and check it against the declared task; paths come back relative."""
    folder, task, labels = Path(args["folder"]), str(args.get("task") or ""), list(args.get("labels") or [])
    progress(10, "checking the format")
    info = sniff(folder)
    if task and info.get("task") and task != info["task"]:
        raise InvalidModel(f"the upload was declared {task} but its config describes {info['task']}")
    if not (task or info.get("task")):
        raise InvalidModel(f"say which task this {info['format']} model performs")
    if info["format"] == "onnx":
        progress(50, "checking the ONNX graph")
        info["details"] = inspect_onnx(info["path"], allow_external=True)
        check_task(task, info["details"], labels=labels)
    info["path"] = str(Path(info["path"]).relative_to(folder))
    return as_json(info)


def export(args: Args, progress: Progress) -> dict[str, Any]:
    """Export a Hugging Face folder or TorchScript file to out/model.onnx; the report and the graph's signature."""
    out = Path(args["out"])
    report = export_onnx(
        Path(args["src"]),
        out,
        args.get("task"),
        progress=scaled(progress, 0, 90),
        input_shape=args.get("input_shape"),
    )
    details = inspect_onnx(out / "model.onnx") if (out / "model.onnx").is_file() else None
    return as_json({"report": report, "details": details})


def convert(args: Args, progress: Progress) -> dict[str, Any]:
    """One conversion (quantize, fp16, optimize) to ``dst``, then, if asked, its comparison with the parent."""
    op, src, dst, options = args["op"], Path(args["model"]), Path(args["dst"]), dict(args["options"])
    to_half = scaled(progress, 0, 50)
    if op == "quantize_dynamic":
        conversion = quantize_dynamic_int8(src, dst, **options, progress=to_half)
    elif op == "quantize_static":
        options["tokenizer"] = _path(options.get("tokenizer"))
        conversion = quantize_static_int8(src, dst, **options, progress=to_half)
    elif op == "fp16":
        conversion = convert_fp16(src, dst, **options, progress=to_half)
    elif op == "optimize":
        conversion = optimize_graph(src, dst, **options, progress=to_half)
    else:
        raise ValueError(f"unknown conversion {op!r}")
    result: dict[str, Any] = {"conversion": conversion}
    if args.get("compare"):
        result |= compare({**args["compare"], "child": str(dst)}, scaled(progress, 50, 100))
    return as_json(result)


def compare(args: Args, progress: Progress) -> dict[str, Any]:
    """Agreement and latency of ``child`` against ``parent`` (both ONNX)."""
    parent, child, task = Path(args["parent"]), Path(args["child"]), str(args["task"])
    agreement = evaluate(
        parent,
        child,
        task,
        _path(args.get("dataset")),
        preprocessing=args.get("preprocessing"),
        tokenizer=_path(args.get("tokenizer")),
        labels=args.get("labels"),
        limit=int(args["limit"]),
        progress=scaled(progress, 0, 50),
    )
    latency = compare_latency(parent, child, task, runs=int(args["runs"]), progress=scaled(progress, 50, 100))
    return as_json({"agreement": agreement, "latency": latency})


def tune_int8(args: Args, progress: Progress) -> dict[str, Any]:
    """Accuracy-aware INT8 tuning of ``model``: trials in out/, the kept one named by the report's ``file``."""
    run = TuningRun(
        model=Path(args["model"]),
        out=Path(args["out"]),
        task=str(args["task"]),
        mode=str(args["mode"]),
        preprocessing=args.get("preprocessing"),
        tokenizer=_path(args.get("tokenizer")),
        dataset=_path(args.get("dataset")),
        limit=int(args["limit"]),
        labels=args.get("labels"),
    )
    targets = parse_targets(list(args["targets"]))
    report = tune(
        run, list(args["candidates"]), targets, max_trials=int(args["max_trials"]), progress=progress
    )
    return as_json(report)


def quantize_weights(args: Args, progress: Progress) -> dict[str, Any]:
    """Weight-only INT4/INT8 of a causal LM to ``dst``, compared with its source (size, speed, perplexity)."""
    report = quantize_and_compare(
        Path(args["model"]),
        Path(args["dst"]),
        tokenizer=Path(args["tokenizer"]),
        texts=_path(args.get("texts")),
        limit=int(args["limit"]),
        options=dict(args["options"]),
        progress=progress,
    )
    return as_json(report)


def time_model(args: Args, progress: Progress) -> dict[str, Any]:
    """Benchmark one ONNX model."""
    report = benchmark(
        Path(args["model"]),
        str(args["task"]),
        runs=int(args["runs"]),
        rounds=int(args["rounds"]),
        progress=progress,
    )
    return as_json(report)


def _worker_pid() -> int:
    """The worker's pid as /proc shows it: the first ancestor that is not the sandbox child (in its PID
    namespace the task's ``getppid()`` is the namespace's init, itself a child of the sandbox child)."""
    status = "/proc/self/status"
    for _ in range(8):
        lines = Path(status).read_text().splitlines()
        parent = int(next(line.split()[1] for line in lines if line.startswith("PPid:")))
        try:
            cmdline = Path(f"/proc/{parent}/cmdline").read_bytes()
        except OSError:
            return parent
        if parent <= 1 or b"inference.sandbox.child" not in cmdline:
            return parent
        status = f"/proc/{parent}/status"
    return os.getppid()


def _daemon(seconds: float) -> None:
    """Double fork and ``setsid()``: a process out of the job's process group, its parent gone."""
    if os.fork() != 0:
        return
    try:
        os.setsid()
        if os.fork() == 0:
            time.sleep(seconds)
    finally:
        os._exit(0)


def confinement(args: Args, progress: Progress) -> dict[str, Any]:
    """What code in the sandbox can see and reach (the operators' and the tests' check of confinement)."""
    seen: dict[str, Any] = {"uid": os.getuid(), "environ": dict(os.environ), "files": {}, "connect": {}}
    for path in [
        *args.get("paths", []),
        "/proc/self/environ",
        "/proc/1/environ",
        f"/proc/{_worker_pid()}/environ",
    ]:
        try:
            seen["files"][path] = Path(path).read_bytes()[:65536].decode("utf-8", "replace")
        except OSError as exc:
            seen["files"][path] = f"refused: {exc.strerror}"
    for host, port in args.get("connect", []):
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                seen["connect"][f"{host}:{port}"] = "connected"
        except OSError as exc:
            seen["connect"][f"{host}:{port}"] = f"refused: {exc.strerror or exc}"
    for _ in range(int(args.get("daemons", 0))):  # what hostile code does to outlive its job
        _daemon(float(args.get("daemon_s", 60)))
    for name in args.get("fifos", []):  # outputs replaced by FIFOs: the parent must not wait on them
        Path(name).unlink(missing_ok=True)
        os.mkfifo(name)
    if args.get("exit_now"):  # leave at once, as if the task had written its outputs
        os._exit(0)
    if args.get("sleep_s"):  # holds the child: checks of the wall-clock limit and of cancellation
        time.sleep(float(args["sleep_s"]))
    if args.get("allocate_bytes"):
        seen["allocated"] = len(bytearray(int(args["allocate_bytes"])))
    return seen


def check_image_set(args: Args, progress: Progress) -> dict[str, Any]:
    """Check an uploaded image set (extract, decode every image) into out/; what the dataset records."""
    from dataclasses import asdict

    from inference.validation.image_sets import DatasetLimits, check_image_archive

    progress(5, "checking the image set")
    limits = DatasetLimits(**dict(args["limits"]))
    checked = check_image_archive(Path(args["archive"]), Path(args["work"]), limits)
    found = asdict(checked) | {"path": str(checked.path.relative_to(args["work"])), "pid": os.getpid()}
    return as_json(found)


TASKS: dict[str, Callable[[Args, Progress], dict[str, Any]]] = {
    "check_image_set": check_image_set,
    "check_upload": check_upload,
    "export": export,
    "convert": convert,
    "quantize_weights": quantize_weights,
    "tune_int8": tune_int8,
    "compare": compare,
    "benchmark": time_model,
    "confinement": confinement,
}
