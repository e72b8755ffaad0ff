"""Team acme with one person per role, and something of each kind to act on.

Besides the role being tested (`actor`), acme has Olivia (owner), Sam (a member whose role gets
changed or who gets removed), one version deployed as `colours`, a spare version to delete, a queued
job, a failed job, a pending invitation, and API keys of the actor and of Sam.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client

from accounts.models import Membership
from accounts.services import api_key_create
from accounts.team_services import invitation_create
from inference.models import Job, JobStatus
from inference.services.deployments import DeploymentSpec, deployment_create
from inference.services.jobs import job_start
from inference.services.registry import UploadedModel, model_version_upload
from tests.inference.conftest import colour_version, node_hk_cpu  # noqa: F401 (fixtures)
from tests.support import people
from tests.support.tiny_models import COLOURS, colour_classifier


@dataclass
class Acme:
    team: object
    owner: object
    actor: object
    client: Client
    deployed: object
    spare: object
    queued_job: object
    failed_job: object
    invitation: object
    own_key: object
    sam_key: object


def upload(team, actor, path):
    return model_version_upload(
        team=team,
        actor=actor,
        upload=UploadedModel(
            name="colours",
            task="image-classification",
            model_chunks=[path.read_bytes()],
            labels_text="\n".join(COLOURS),
        ),
    )


def acme_with(role: str, tmp_path) -> Acme:
    owner = people.owner()
    team = owner.memberships.get().team
    actor = people.person("ada", "acme", "member")  # a member first, so she can own a key
    sam = people.person("sam", "acme", "member")
    path = colour_classifier(tmp_path / "c.onnx")
    deployed, spare = upload(team, owner, path), upload(team, owner, path)
    deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=deployed.pk)
    )
    queued = job_start(team=team, actor=owner, source=deployed, kind="quantize_int8")
    failed = job_start(team=team, actor=owner, source=deployed, kind="quantize_int8")
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, error="boom")
    invitation, _ = invitation_create(team=team, actor=owner, role="viewer")
    own_key, _ = api_key_create(team=team, actor=actor, name="ada's", scopes=["inference"])
    sam_key, _ = api_key_create(team=team, actor=sam, name="sam's", scopes=["inference"])
    Membership.objects.filter(team=team, user=actor).update(role=role)
    client = Client()
    client.force_login(actor)
    return Acme(team, owner, actor, client, deployed, spare, queued, failed, invitation, own_key, sam_key)


@pytest.fixture
def acme_factory(db, tmp_path):
    return lambda role: acme_with(role, tmp_path)
