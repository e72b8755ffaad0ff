"""Writes of datasets: create (check, normalise, store), delete; and laying one out on disk for a job."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict, ValidationFailed
from evalsets.checks import Checked, DatasetLimits, check_json_lines
from evalsets.models import Dataset, DatasetKind
from evalsets.selectors import dataset_get_by_id
from inference import storage
from inference.sandbox import Sandbox, SandboxFailed, SandboxLimits
from inference.services.blobs import blobs_in_use
from inference.validation.archives import ArchiveLimits, extract_zip
from inference.validation.formats import InvalidModel

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def limits() -> DatasetLimits:
    return DatasetLimits(
        max_items=settings.DATASET_MAX_ITEMS,
        max_expanded_bytes=settings.DATASET_MAX_EXPANDED_BYTES,
        max_image_pixels=settings.DATASET_MAX_IMAGE_PIXELS,
        max_total_pixels=settings.DATASET_MAX_TOTAL_PIXELS,
    )


def check_limits() -> SandboxLimits:
    """The sandbox child that checks an image set: the model imports' memory, CPU and file limits."""
    return SandboxLimits(
        memory_bytes=settings.SANDBOX_MEMORY_BYTES,
        cpu_seconds=settings.SANDBOX_CPU_S,
        timeout_s=float(settings.SANDBOX_TIMEOUT_S),
        file_bytes=settings.SANDBOX_FILE_BYTES,
        user=settings.SANDBOX_USER,
    )


def dataset_create(
    *, team: Team, actor, name: str, kind: str, chunks: Iterable[bytes], description: str = ""
) -> Dataset:
    """Check an upload and store it as the team's dataset ``name``; nothing is kept if any check fails.

    Refusals are 422 with the reason (layout, labels, hostile archive, non-image, empty), 413 past the
    size cap, 409 when the team already has a dataset of that name (also when two uploads race).
    """
    permission_require(team=team, user=actor, action="dataset.create")
    if not NAME_RE.match(name):
        raise ValidationFailed("dataset name must be lowercase letters, digits and dashes (max 63)")
    if kind not in DatasetKind.values:
        raise ValidationFailed(
            f"unknown dataset kind {kind!r}; choose one of {', '.join(DatasetKind.values)}"
        )
    if Dataset.objects.filter(team=team, name=name).exists():
        raise Conflict(f"the team already has a dataset named {name!r}")
    upload = storage.stage(chunks, max_bytes=settings.DATASET_MAX_BYTES)
    try:
        with tempfile.TemporaryDirectory(dir=upload.path.parent, prefix="dataset-") as work:
            checked = _check(upload.path, kind, Path(work))
            normalised = storage.stage_file(checked.path, max_bytes=settings.DATASET_MAX_EXPANDED_BYTES)
        try:
            return _store(team=team, actor=actor, name=name, kind=kind, checked=checked,
                          staged=normalised, description=description)  # fmt: skip
        finally:
            normalised.discard()  # no-op once committed into the store
    finally:
        upload.discard()


def _check(upload: Path, kind: str, work: Path) -> Checked:
    if kind == DatasetKind.IMAGES:
        return _check_images_in_sandbox(upload, work)
    return check_json_lines(upload, kind, work / "normalised.jsonl", limits())


def _check_images_in_sandbox(upload: Path, work: Path) -> Checked:
    """Extract and decode the image set in a sandbox child (rlimits bound its memory and CPU), not here.

    The answer stays the same: a refusal is a 422 with the reason, and so is a set the child could not
    check within its limits (memory, CPU seconds, time).
    """
    try:
        with Sandbox(check_limits()) as box:
            archive = box.put("upload.zip", upload)
            args = {"archive": str(archive), "work": str(box.out), "limits": asdict(limits())}
            found = box.call("check_image_set", args)
            path = box.take(_relative(found.get("path")), work / "normalised.zip")
    except InvalidModel as exc:
        raise ValidationFailed(str(exc)) from None
    except SandboxFailed as exc:
        raise ValidationFailed(f"the image set could not be checked: {exc}") from None
    return _checked(found, path)


def _relative(value: object) -> str:
    if not isinstance(value, str) or value.startswith("/") or ".." in value.split("/"):
        raise ValidationFailed("the image set could not be checked: the check wrote no normalised set")
    return value


def _checked(found: dict, path: Path) -> Checked:
    """The child's answer, type-checked: it decoded hostile files, so nothing it says is taken as is."""
    counts = found.get("class_counts") or {}
    samples = found.get("samples") or []
    ok = (
        isinstance(found.get("item_count"), int)
        and isinstance(found.get("labelled"), bool)
        and isinstance(counts, dict)
        and all(isinstance(k, str) and isinstance(v, int) for k, v in counts.items())
        and isinstance(samples, list)
        and all(_sample_ok(sample) for sample in samples)
    )
    if not ok:
        raise ValidationFailed("the image set could not be checked: the check's answer was malformed")
    return Checked(path, found["item_count"], found["labelled"], counts, samples)


def _sample_ok(sample: object) -> bool:
    return (
        isinstance(sample, dict)
        and set(sample) == {"label", "name", "thumbnail"}
        and all(isinstance(v, str) for v in sample.values())
        and sample["thumbnail"].startswith("data:image/jpeg;base64,")
    )


def _store(
    *, team: Team, actor, name: str, kind: str, checked: Checked, staged: storage.StagedFile, description: str
) -> Dataset:
    created: Path | None = None
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(
                team=team,
                name=name,
                kind=kind,
                description=description,
                sha256=staged.sha256,
                size_bytes=staged.size,
                item_count=checked.item_count,
                labelled=checked.labelled,
                class_counts=checked.class_counts,
                samples=checked.samples,
                created_by=actor,
            )
            path, is_new = storage.commit(staged)
            created = path if is_new else None
            audit_record(team=team, actor=actor, action="dataset.create", target=name,
                         data={"kind": kind, "items": checked.item_count, "sha256": staged.sha256})  # fmt: skip
    except IntegrityError:
        _drop_unreferenced(created)
        raise Conflict(f"the team already has a dataset named {name!r}") from None
    except BaseException:
        _drop_unreferenced(created)
        raise
    return dataset


def _drop_unreferenced(path: Path | None) -> None:
    if path is not None and not _referenced(path.name):
        path.unlink(missing_ok=True)


def _referenced(sha256: str) -> bool:
    """Whether any team's version, artifact, dataset or job names the blob (the store is shared)."""
    return bool(blobs_in_use([sha256]))


def dataset_delete(*, team: Team, actor, dataset: Dataset) -> None:
    """Delete a dataset; its stored file goes once nothing else holds the same content."""
    permission_require(team=team, user=actor, action="dataset.delete")
    sha, name = dataset.sha256, dataset.name
    with transaction.atomic():
        dataset.delete()
        audit_record(team=team, actor=actor, action="dataset.delete", target=name)
        transaction.on_commit(lambda: _drop_unreferenced(storage.blob_path(sha)))


def dataset_materialize(dataset: Dataset, dest: Path) -> Path:
    """Lay the dataset out under ``dest`` (created; must not exist) as jobs read it; return what to pass.

    Images: ``dest/<label>/<file>`` (flat when unlabelled), returns ``dest``. Texts and prompts:
    ``dest/texts.jsonl`` of ``{"text": ..., "label"?: ...}`` (a prompt becomes the text), returns the file.
    """
    blob = storage.blob_path(dataset.sha256)
    if dataset.kind == DatasetKind.IMAGES:
        # Our own zip, but extracted with the upload rules all the same (the store is a disk, not a proof).
        extract_zip(blob, dest, ArchiveLimits(max_total_bytes=2 * dataset.size_bytes + 1024,
                                              max_files=dataset.item_count + 1))  # fmt: skip
        return dest
    dest.mkdir(parents=True)
    out = dest / "texts.jsonl"
    with blob.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as handle:
        for line in src:
            row = json.loads(line)
            if "prompt" in row:
                row = {"text": row["prompt"]}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out


def dataset_for_job(
    *, team: Team, dataset_id: int, dest: Path, kinds: tuple[str, ...] = ()
) -> tuple[Path, dict]:
    """A job's dataset laid out under ``dest`` (see ``dataset_materialize``) and how its report names it.

    ``kinds`` limits the dataset kinds the job can use (a 422 naming the kind otherwise); another
    team's dataset is not found.
    """
    dataset = dataset_get_by_id(team=team, dataset_id=dataset_id)
    if kinds and dataset.kind not in kinds:
        raise ValidationFailed(
            f"dataset {dataset.name!r} is of kind {dataset.kind}; this job needs one of kind {' or '.join(kinds)}"
        )
    return dataset_materialize(dataset, dest), dataset_summary(dataset)


def dataset_summary(dataset: Dataset) -> dict:
    """What a job report says about the set it used."""
    return {
        "name": dataset.name,
        "id": dataset.pk,
        "kind": dataset.kind,
        "count": dataset.item_count,
        "labelled": dataset.labelled,
        "sha256": dataset.sha256,
    }


def dataset_text_lines(*, team: Team, dataset_id: int, dest: Path) -> tuple[Path, dict]:
    """A text or prompt dataset of ``team`` as one text per line in ``dest`` (what perplexity reads)."""
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".dataset-") as work:
        kinds = (DatasetKind.TEXTS, DatasetKind.PROMPTS)
        jsonl, summary = dataset_for_job(
            team=team, dataset_id=dataset_id, dest=Path(work) / "set", kinds=kinds
        )
        lines = [" ".join(json.loads(line)["text"].split()) for line in jsonl.read_text("utf-8").splitlines()]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest, summary
