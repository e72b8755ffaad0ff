"""Progress reporting, cancellation between steps and clean-up of partial output, shared by every job."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Progress = Callable[[float, str], None]
Cancelled = Callable[[], bool]


class JobCancelled(Exception):
    """Raised between steps when ``cancelled()`` says so; the job's partial output is already removed."""


def _no_progress(percent: float, message: str) -> None:
    return None


def _never() -> bool:
    return False


class Steps:
    """Call ``steps(percent, message)`` before each step: it checks cancellation, then reports."""

    def __init__(self, progress: Progress | None, cancelled: Cancelled | None) -> None:
        self.progress = progress or _no_progress
        self.cancelled = cancelled or _never

    def __call__(self, percent: float, message: str) -> None:
        if self.cancelled():
            raise JobCancelled(f"cancelled before: {message}")
        self.progress(float(percent), message)


@contextmanager
def job_steps(output: Path, progress: Progress | None, cancelled: Cancelled | None) -> Iterator[Steps]:
    """Run a job writing ``output`` (a file or a folder); on any failure or cancellation remove it."""
    output = Path(output)
    existed = output.exists()
    before = set(output.iterdir()) if output.is_dir() else set()
    steps = Steps(progress, cancelled)
    try:
        steps(0, "starting")
        yield steps
    except BaseException:
        if not existed:
            remove(output)
        for child in set(output.iterdir()) - before if output.is_dir() else ():
            remove(child)  # a folder that was there before keeps only what it held
        raise
    steps.progress(100.0, "done")


def remove(path: Path) -> None:
    """Delete a file or folder and the ``.data`` companions ORT writes next to a model."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    for companion in path.parent.glob(path.name + ".*data"):
        companion.unlink(missing_ok=True)


@contextmanager
def scratch_dir(near: Path) -> Iterator[Path]:
    """A temporary folder beside ``near`` (same disk), always removed."""
    import tempfile

    Path(near).parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".lantau-", dir=Path(near).parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
