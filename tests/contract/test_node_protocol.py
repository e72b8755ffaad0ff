"""The node protocol (``contract.node_protocol``): one definition both sides use, byte-compatible with
the JSON agents and consoles exchanged before it existed."""

from __future__ import annotations

import json

import pytest

from contract.node_protocol import (
    LIMIT_KEYS,
    RUNNER_LIMITS,
    SPEC_KEYS,
    DesiredReplica,
    HeartbeatAnswer,
    HeartbeatRequest,
    ProtocolError,
    ReplicaReport,
    heartbeat_answer_parse,
    limits_of,
)

# A heartbeat answer and request as a console and an agent of the previous release sent them
# (recorded from tests/fleet's stack before the protocol was typed).
RECORDED_ANSWER = (
    '{"node": "hk-1", "region": "hk", "replicas": [{"id": 7, "deployment": "colours", "version_id": 3, '
    '"artifacts": [{"filename": "model.onnx", "sha256": "ab12", "size": 1234, '
    '"url": "/api/v1/nodes/artifacts/ab12"}], "manifest": {"deployment": "colours", "task": '
    '"image-classification"}, "gpu_index": null, "device": "cpu", "batching": {"max_batch_size": 8, '
    '"max_queue_delay_ms": 5}, "runner_token": "f00d", "redis_prefix": "lantau", "limits": '
    '{"max_body_bytes": 10485760, "max_json_depth": 32, "max_prompt_bytes": 1048576, "max_messages": 256, '
    '"max_stop_strings": 4, "max_inputs": 256, "max_image_pixels": 40000000}}], "rotate_credential": false}'
)
RECORDED_REQUEST = (
    '{"region": "hk", "inventory": {"cpus": 2, "gpus": [], "labels": {}, "advertise_host": "127.0.0.1"}, '
    '"replicas": [{"id": 7, "state": "ready", "url": "http://127.0.0.1:20007"}, '
    '{"id": 8, "state": "failed", "error": "exit 2"}, {"id": 9, "state": "starting", "gpu_memory_bytes": 5}]}'
)


def test_a_recorded_answer_goes_through_unchanged():
    answer = heartbeat_answer_parse(json.loads(RECORDED_ANSWER))
    assert json.dumps(answer) == RECORDED_ANSWER
    desired = answer["replicas"][0]
    assert set(desired) == DesiredReplica.__required_keys__  # every field today's console sends, named
    assert limits_of(desired) == desired["limits"]


def test_a_recorded_request_has_the_typed_shape():
    request = json.loads(RECORDED_REQUEST)
    assert set(request) == HeartbeatRequest.__required_keys__
    for report in request["replicas"]:
        assert (
            ReplicaReport.__required_keys__
            <= set(report)
            <= (ReplicaReport.__required_keys__ | ReplicaReport.__optional_keys__)
        )


def test_an_answer_without_rotate_credential_means_false():
    """A console of an older release may leave out fields the agent reads: their defaults hold."""
    answer = heartbeat_answer_parse({"replicas": []})
    assert answer == {"node": "", "region": "", "replicas": [], "rotate_credential": False}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], "not a JSON object"),
        ({"replicas": {"id": 1}}, "no list of replicas"),
        ({}, "no list of replicas"),
        ({"replicas": [], "rotate_credential": "yes"}, "rotate_credential"),
        ({"replicas": [], "node": 5}, "strings"),
    ],
)
def test_an_answer_of_another_shape_is_refused(body, words):
    with pytest.raises(ProtocolError, match=words):
        heartbeat_answer_parse(body)


def test_limits_keep_only_known_positive_integers():
    desired = {"limits": {"max_inputs": 4, "max_messages": True, "max_json_depth": -1, "max_bogus": 9,
                          "max_prompt_bytes": "big"}}  # fmt: skip
    assert limits_of(desired) == {"max_inputs": 4}
    assert limits_of({"limits": "all"}) == {} and limits_of({}) == {}


def test_the_runner_accepts_every_limit_the_console_sends(tmp_path):
    """Each limit's flag is a runner flag, and the value reaches the runner's config under its field."""
    from inference.runner.config import build_parser

    argv = ["--model-dir", str(tmp_path), "--port", "0"]
    for n, limit in enumerate(RUNNER_LIMITS, start=1):
        argv += [limit.flag, str(1000 + n)]
    args = build_parser().parse_args(argv)
    for n, limit in enumerate(RUNNER_LIMITS, start=1):
        assert getattr(args, limit.field) == 1000 + n, limit


def test_the_spec_keys_are_fields_of_a_desired_replica():
    fields = DesiredReplica.__required_keys__ | DesiredReplica.__optional_keys__
    assert set(SPEC_KEYS) <= fields
    assert HeartbeatAnswer.__required_keys__ == {"node", "region", "replicas", "rotate_credential"}


@pytest.mark.django_db
def test_the_console_builds_what_the_protocol_names(settings, tmp_path, owner, team):
    """What the console answers (``desired_for``) and reads (``HeartbeatIn``) are the protocol's fields,
    its limits come from the settings the protocol names."""
    from inference.schemas import HeartbeatIn
    from inference.schemas import ReplicaReport as ReportSchema
    from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
    from inference.services.nodes import desired_for, runner_limits
    from inference.services.registry import UploadedModel, model_version_upload
    from tests.support import hardware
    from tests.support.tiny_models import COLOURS, colour_classifier

    for limit in RUNNER_LIMITS:
        assert isinstance(getattr(settings, limit.setting), int), limit.setting
    assert set(runner_limits()) == LIMIT_KEYS
    assert set(HeartbeatIn.model_fields) == HeartbeatRequest.__required_keys__
    assert set(ReportSchema.model_fields) == ReplicaReport.__required_keys__ | ReplicaReport.__optional_keys__

    node = hardware.node_hk_cpu()
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(name="colours", task="image-classification", model_chunks=[path.read_bytes()],
                           labels_text="\n".join(COLOURS))  # fmt: skip
    version = model_version_upload(team=team, actor=owner, upload=upload)
    spec = DeploymentSpec(name="colours", model_version_id=version.pk, replicas=2, region="hk")
    deployment_reconcile(deployment_create(team=team, actor=owner, spec=spec).pk)
    desired = desired_for(node)
    assert desired, "the colour deployment was placed on the node"
    for entry in desired:
        assert DesiredReplica.__required_keys__ <= set(entry)
        assert set(entry) <= DesiredReplica.__required_keys__ | DesiredReplica.__optional_keys__
        assert limits_of(entry) == runner_limits()
