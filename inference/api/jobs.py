"""Jobs: start, list, show, cancel, retry, log."""

from ninja import Router, Status

from inference import selectors
from inference.schemas import JobIn, JobLogOut, JobOut
from inference.services.jobs import job_cancel, job_retry, job_start

router = Router(tags=["jobs"])


@router.get("", response=list[JobOut])
def job_list(request, version_id: int | None = None):
    return list(selectors.jobs_for_team(team=request.auth.team, version_id=version_id)[:200])


@router.post("", response={201: JobOut})
def job_new(request, payload: JobIn):
    """Start a job of one of the registered kinds (`quantize_int8`, `fp16`, `optimize`, `export_onnx`,
    `evaluate`, `benchmark`). `options` follow the kind's schema (see `x-options-by-kind` on the request
    schema); an unknown or out-of-range option is refused with 422 naming it (`options.<name>: ...`)."""
    source = selectors.version_get(team=request.auth.team, version_id=payload.version_id)
    job = job_start(
        team=request.auth.team,
        actor=request.auth.user,
        source=source,
        kind=payload.kind,
        options=payload.options,
    )
    return Status(201, selectors.job_get(team=request.auth.team, job_id=job.pk))


@router.get("/{job_id}", response=JobOut)
def job_show(request, job_id: int):
    return selectors.job_get(team=request.auth.team, job_id=job_id)


@router.post("/{job_id}/cancel", response=JobOut)
def job_stop(request, job_id: int):
    job = selectors.job_get(team=request.auth.team, job_id=job_id)
    return job_cancel(team=request.auth.team, actor=request.auth.user, job=job)


@router.post("/{job_id}/retry", response=JobOut)
def job_again(request, job_id: int):
    job = selectors.job_get(team=request.auth.team, job_id=job_id)
    return job_retry(team=request.auth.team, actor=request.auth.user, job=job)


@router.get("/{job_id}/log", response=list[JobLogOut])
def job_log(request, job_id: int):
    return list(selectors.job_get(team=request.auth.team, job_id=job_id).log_lines.all())
