"""Console pages: who may see them (member_required) and how their forms treat malformed numbers."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership
from inference.models import Deployment, Job, JobKind
from inference.services.deployments import DeploymentSpec, deployment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def colours(owner, team, colour_version):
    return deployment_create(
        team=team,
        actor=owner,
        spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk, replicas=2),
    )


@pytest.fixture
def colour_job(owner, team, colour_version):
    return Job.objects.create(team=team, kind=JobKind.BENCHMARK, source=colour_version, created_by=owner)


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def flashes(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def pages(colour_job):
    return [
        "/models/",
        "/models/colours/",
        f"/jobs/{colour_job.pk}/",
        "/deployments/",
        "/deployments/colours/",
    ]


def test_anonymous_people_are_sent_to_login_from_every_page(colours, colour_version, colour_job):
    for url in pages(colour_job) + ["/accounts/keys/"]:
        r = Client().get(url)
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/"), url
    r = Client().post("/deployments/colours/action", {"action": "delete"})
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert Deployment.objects.filter(name="colours").exists()


def test_outsiders_get_404_for_another_teams_objects(outsider, colours, colour_version, colour_job):
    other = client_for(outsider)
    for url in ["/models/colours/", f"/jobs/{colour_job.pk}/", "/deployments/colours/"]:
        assert other.get(url).status_code == 404, url
    assert b"colours" not in other.get("/deployments/").content
    other.post("/deployments/colours/action", {"action": "delete"})
    assert Deployment.objects.filter(name="colours").exists()


def test_people_in_no_team_get_404(colours):
    loner = get_user_model().objects.create_user(username="lonely", password="pw-lonely-123456")
    assert client_for(loner).get("/deployments/").status_code == 404
    assert client_for(loner).get("/accounts/keys/").status_code == 404


def test_team_hint_picks_which_of_a_persons_teams_a_page_shows(owner, outsider, colours):
    globex = outsider.memberships.get().team
    Membership.objects.create(team=globex, user=owner, role="member")
    client = client_for(owner)
    assert client.get("/deployments/colours/").status_code == 200  # the first team by default
    assert client.get(f"/deployments/colours/?team={globex.pk}").status_code == 404
    assert client.get("/deployments/colours/?team=999999").status_code == 404  # not a member there


def test_teammates_see_the_teams_pages(teammate, colours, colour_version, colour_job):
    client = client_for(teammate)
    for url in pages(colour_job):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("replicas", "two", "replicas must be a whole number, got 'two'"),
        ("max_batch_size", "8.5", "max_batch_size must be a whole number, got '8.5'"),
        ("max_queue_delay_ms", "5ms", "max_queue_delay_ms must be a whole number, got '5ms'"),
        ("model_version_id", "first", "model_version_id must be a whole number, got 'first'"),
    ],
)
def test_create_form_refuses_a_malformed_number_and_creates_nothing(
    owner_client, colour_version, field, value, message
):
    form = {"name": "page-dep", "model_version_id": colour_version.pk, "replicas": "1", field: value}
    r = owner_client.post("/deployments/", form)
    assert r.status_code == 200 and flashes(r) == [message]
    assert not Deployment.objects.exists()


def test_create_form_blank_numbers_take_the_api_defaults(owner_client, colour_version):
    form = {"name": "page-dep", "model_version_id": colour_version.pk, "replicas": "", "max_batch_size": " "}
    assert owner_client.post("/deployments/", form).status_code == 302
    d = Deployment.objects.get(name="page-dep")
    assert (d.replicas, d.max_batch_size, d.max_queue_delay_ms) == (1, 8, 5)


@pytest.mark.parametrize(
    "form, message",
    [
        ({"action": "scale", "replicas": "3x"}, "replicas must be a whole number, got '3x'"),
        ({"action": "scale", "replicas": ""}, "replicas is required"),
        (
            {"action": "version", "model_version_id": "latest"},
            "model_version_id must be a whole number, got 'latest'",
        ),
    ],
)
def test_scale_and_version_forms_refuse_a_malformed_number_and_change_nothing(
    owner_client, colours, form, message
):
    r = owner_client.post("/deployments/colours/action", {**form, "next": "detail"}, follow=True)
    assert r.redirect_chain[-1][0] == "/deployments/colours/" and flashes(r) == [message]
    colours.refresh_from_db()
    assert colours.replicas == 2 and colours.model_version.number == 1


def test_scale_form_still_scales(owner_client, colours):
    r = owner_client.post("/deployments/colours/action", {"action": "scale", "replicas": " 3 "}, follow=True)
    assert flashes(r) == ["colours: scale done."]
    colours.refresh_from_db()
    assert colours.replicas == 3


@pytest.mark.parametrize(
    "value, message",
    [
        ("v1", "version_id must be a whole number, got 'v1'"),
        ("", "version_id is required"),
    ],
)
def test_job_form_refuses_a_malformed_version_and_starts_nothing(
    owner_client, colour_version, value, message
):
    r = owner_client.post(
        "/models/colours/jobs", {"version_id": value, "kind": JobKind.BENCHMARK}, follow=True
    )
    assert flashes(r) == [message]
    assert not Job.objects.exists()
