"""The playground's pages: one panel per kind of model fed with the team's own deployments only, a
Playground section on each deployment's page, bundled sample photos as JPEG."""

from __future__ import annotations

import io

import pytest
from django.test import Client
from PIL import Image

from inference.models import Deployment
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


@pytest.fixture
def colours(team, owner, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="pgp", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    return Deployment.objects.create(team=team, name="pg-colours", model_version=version)


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_playground_offers_the_teams_image_deployment_in_the_image_panel(owner, colours):
    page = client_for(owner).get("/playground/?deployment=pg-colours").content.decode()
    image_panel = page.split('id="pg-image"')[1].split('id="pg-chat"')[0]
    assert 'value="pg-colours"' in image_panel and "selected" in image_panel
    assert 'id="pg-chat"' in page and "No chat deployment in this team" in page  # empty state, not an error
    assert "Playground</a>" in page  # in the navigation


def test_another_team_sees_none_of_the_deployments(outsider, colours):
    c = client_for(outsider)
    assert "pg-colours" not in c.get("/playground/?deployment=pg-colours").content.decode()
    assert c.get("/deployments/pg-colours/playground").status_code == 404


def test_the_deployment_page_has_a_playground_section_and_a_link_into_the_playground(owner, colours):
    c = client_for(owner)
    page = c.get("/deployments/pg-colours/").content.decode()
    assert 'id="deployment-playground"' in page and 'id="pg-image-deployment"' in page
    assert 'id="pg-chat"' not in page  # only the panel for this deployment's kind
    r = c.get("/deployments/pg-colours/playground")
    assert r.status_code == 302 and r["Location"] == "/playground/?deployment=pg-colours"


def test_a_viewer_is_told_they_cannot_run_models(viewer, colours):
    page = client_for(viewer).get("/playground/").content.decode()
    assert "Your role (viewer) cannot run models" in page and 'data-can-run="0"' in page


def test_sample_photos_are_jpeg_for_signed_in_people_only(owner):
    r = client_for(owner).get("/playground/samples/chelsea.jpg")
    assert r.status_code == 200 and r["Content-Type"] == "image/jpeg"
    assert Image.open(io.BytesIO(r.content)).size == (451, 300)
    assert client_for(owner).get("/playground/samples/nope.jpg").status_code == 404
    assert Client().get("/playground/samples/chelsea.jpg").status_code == 302
