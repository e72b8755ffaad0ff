"""The wire contract (contract/): API keys and their cache entry, Redis key names, the listening line,
the error envelope and the replica states. Pure functions: no database, no Redis."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from contract.apikeys import (
    KeyIdentity,
    bearer_token,
    entry_json,
    key_generate,
    key_hash,
    key_is_well_formed,
    parse_entry,
)
from contract.envelope import error_envelope
from contract.listening import format_listening, parse_listening
from contract.redis_keys import RedisKeys
from contract.replicas import REPORTABLE, ReplicaState

REPO = Path(__file__).resolve().parents[2]


def test_generated_keys_are_well_formed_and_hashed_as_sha256_of_the_whole_key() -> None:
    clear, prefix, digest = key_generate()
    assert key_is_well_formed(clear) and clear.startswith(prefix + "_") and len(prefix) == 11
    assert digest == key_hash(clear) == hashlib.sha256(clear.encode()).hexdigest()
    assert key_generate()[0] != clear


@pytest.mark.parametrize(
    "key",
    ["", "lt_1234567_" + "a" * 43, "lt_1234567g_" + "a" * 43, "lt_12345678_" + "a" * 42,
     "lt_12345678_" + "a" * 43 + "\n", "xx_12345678_" + "a" * 43, "lt_12345678_" + "a" * 42 + "="],
)  # fmt: skip
def test_malformed_keys_are_refused(key: str) -> None:
    assert not key_is_well_formed(key)


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("BEARER abc", "abc"), (None, None), ("", None),
     ("Bearer", None), ("Bearer    ", None), ("Basic abc", None), ("Token abc", None)],
)  # fmt: skip
def test_bearer_token_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_cache_entry_round_trips_with_and_without_a_rate_limit() -> None:
    plain = entry_json(key_id=5, team_id=2, scopes=["inference", "manage"])
    assert json.loads(plain) == {"key_id": 5, "team_id": 2, "scopes": ["inference", "manage"]}
    assert parse_entry(plain) == KeyIdentity("5", 2, ("inference", "manage"))
    limited = entry_json(key_id=6, team_id=2, scopes=("inference",), rate_per_s=2.5, burst=None)
    assert json.loads(limited)["burst"] == 2  # one second's worth when no burst is given
    assert parse_entry(limited.encode()) == KeyIdentity("6", 2, ("inference",), 2.5, 2)
    assert parse_entry(entry_json(key_id=7, team_id=2, scopes=[], rate_per_s=1, burst=9)).burst == 9


@pytest.mark.parametrize(
    "raw",
    [b"", b"{oops", b"[]", b"null", b'{"team_id": 1, "scopes": []}', b'{"key_id": 1, "scopes": []}',
     b'{"key_id": 1, "team_id": 1}', b'{"key_id": 1, "team_id": "1", "scopes": []}',
     b'{"key_id": 1, "team_id": true, "scopes": []}', b'{"key_id": null, "team_id": 1, "scopes": []}',
     b'{"key_id": 1, "team_id": 1, "scopes": "inference"}', b'{"key_id": 1, "team_id": 1, "scopes": [1]}',
     b"\xff\xfe"],
)  # fmt: skip
def test_malformed_cache_entries_parse_to_none(raw: bytes) -> None:
    assert parse_entry(raw) is None


def test_nonsense_rate_limits_in_an_entry_mean_no_limit() -> None:
    entry = json.dumps({"key_id": 1, "team_id": 1, "scopes": [], "rate_per_s": -1, "burst": True})
    identity = parse_entry(entry)
    assert identity is not None and identity.rate_per_s is None and identity.burst is None


def test_every_redis_key_is_under_the_configured_prefix() -> None:
    names = RedisKeys("installA")
    built = [names.api_key("ab" * 32), names.usage(3), names.rate_limit("3"), names.metrics_channel("colours"),
             names.metrics_last("colours", "r1"), names.metrics_last_pattern("colours")]  # fmt: skip
    assert all(name.startswith("installA:") for name in built)
    assert built[0] == "installA:apikey:" + "ab" * 32 and built[1] == "installA:usage:3"
    assert built[4] == "installA:metrics:last:colours:r1" and built[5] == "installA:metrics:last:colours:*"
    assert RedisKeys().api_key("x") == "lantau:apikey:x"  # the default prefix keeps today's names
    assert RedisKeys("b").api_key("x") != RedisKeys("installA").api_key("x")


@pytest.mark.parametrize("prefix", ["", "a b", "lantau*", "x?", "[ab]", "-x", "a" * 65])
def test_prefixes_that_would_break_names_or_scan_patterns_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RedisKeys(prefix)


def test_listening_line_round_trips_and_other_lines_are_ignored() -> None:
    assert format_listening(8123) == "LANTAU_RUNNER_LISTENING port=8123"
    assert parse_listening(format_listening(8123)) == 8123
    assert parse_listening(format_listening(1) + "\n") == 1
    for other in ["", "LANTAU_RUNNER_LISTENING port=", "LANTAU_RUNNER_LISTENING port=0", "port=80",
                  "LANTAU_RUNNER_LISTENING port=99999", "LANTAU_RUNNER_LISTENING port=80x", "INFO ready"]:  # fmt: skip
        assert parse_listening(other) is None, other
    with pytest.raises(ValueError):
        format_listening(0)


def test_error_envelope_is_the_documented_shape_everywhere() -> None:
    from core.errors import NotFound
    from inference.runner.errors import QueueFull

    assert error_envelope("not_found", "gone") == {"error": {"type": "not_found", "message": "gone"}}
    assert NotFound("gone").as_dict() == error_envelope("not_found", "gone")
    assert QueueFull().as_dict()["error"]["type"] == "queue_full"


def test_replica_states_keep_their_stored_words() -> None:
    assert [s.value for s in ReplicaState] == ["pending", "starting", "ready", "failed"]
    assert ReplicaState.PENDING not in REPORTABLE and ReplicaState.READY == "ready"


def test_the_replica_model_stores_exactly_the_contract_words() -> None:
    from inference.models import ReplicaState as StoredReplicaState

    assert StoredReplicaState.values == [state.value for state in ReplicaState]


def test_the_contract_imports_nothing_but_the_standard_library() -> None:
    code = (
        "import sys, json, contract.apikeys, contract.redis_keys, contract.replicas, contract.listening, "
        "contract.envelope, contract.manifest; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'accounts', 'console', 'core', 'inference', 'redis', 'numpy'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
