"""The wire contract (contract/): API keys and their cache entry, Redis key names, the listening line,
the error envelope and the replica states. Pure functions: no database, no Redis."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contract.apikeys import (
    KeyIdentity,
    bearer_token,
    entry_check,
    entry_open,
    entry_sign,
    key_generate,
    key_hash,
    key_hmac,
    key_is_well_formed,
    key_prefix,
)
from contract.envelope import error_envelope
from contract.listening import format_listening, parse_listening
from contract.quotas import Quota, QuotaRefusal, next_month_start, quota_refusal
from contract.redis_keys import RedisKeys
from contract.replicas import REPORTABLE, ReplicaState
from contract.signing import (
    derive_secret,
    key_pepper,
    public_key_from_text,
    public_key_text,
    sign,
    signing_key_from_secret,
)

REPO = Path(__file__).resolve().parents[2]


def test_generated_keys_are_well_formed_and_hashed_as_sha256_of_the_whole_key() -> None:
    clear, prefix = key_generate()
    assert key_is_well_formed(clear) and clear.startswith(prefix + "_") and key_prefix(clear) == prefix
    assert len(prefix) == 11 and key_hash(clear) == hashlib.sha256(clear.encode()).hexdigest()
    assert key_hmac(b"pepper", clear) != key_hash(clear) and key_hmac(b"pepper", clear) != key_hmac(
        b"other", clear
    )
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


CONSOLE = signing_key_from_secret("contract tests")
VERIFY = CONSOLE.public_key()


def signed(key: str, namespace: str = "lantau", **fields) -> str:
    base = {
        "prefix": key_prefix(key),
        "digest": key_hash(key),
        "key_id": 5,
        "team_id": 2,
        "scopes": ["inference"],
    }
    return entry_sign(CONSOLE, namespace, **(base | fields))


def test_a_signed_entry_opens_only_for_its_key_prefix_and_install() -> None:
    key, prefix = key_generate()
    entry = signed(key, rate_per_s=2.5, deployments=["b", "a"], expires_at=2e9, quota=Quota(requests=9))
    cached = entry_open(entry, VERIFY, "lantau", prefix)
    assert cached is not None and cached.digest == key_hash(key)
    assert cached.identity == KeyIdentity("5", 2, ("inference",), 2.5, 2, ("a", "b"), 2e9, Quota(requests=9))
    assert entry_check(cached, key, now=1e9) == cached.identity
    assert entry_check(cached, key, now=2e9) is None  # expired
    assert entry_check(cached, key[:-1] + ("A" if key[-1] != "A" else "B"), now=1e9) is None  # wrong secret
    assert entry_open(entry, VERIFY, "other-install", prefix) is None
    assert entry_open(entry, VERIFY, "lantau", key_generate()[1]) is None  # another key's name
    assert entry_open(entry, signing_key_from_secret("attacker").public_key(), "lantau", prefix) is None


@pytest.mark.parametrize("tamper", ["team_id", "scopes", "signature", "version"])
def test_a_tampered_entry_does_not_open(tamper: str) -> None:
    key, prefix = key_generate()
    version, sig, body = signed(key).split(".", 2)
    payload = json.loads(body)
    if tamper == "team_id":
        payload["team_id"] = 3
    elif tamper == "scopes":
        payload["scopes"] = ["inference", "manage"]
    changed = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    if tamper == "signature":
        sig = sig[:-2] + ("AA" if not sig.endswith("AA") else "BB")
    if tamper == "version":
        version = "v0"
    assert entry_open(f"{version}.{sig}.{changed}", VERIFY, "lantau", prefix) is None


@pytest.mark.parametrize(
    "raw",
    [b"", b"-", b"{oops", b"v1.", b"v1.x.{}", b'{"key_id": 1, "team_id": 1, "scopes": []}', b"\xff\xfe"],
)
def test_malformed_or_unsigned_cache_entries_open_to_none(raw: bytes) -> None:
    assert entry_open(raw, VERIFY, "lantau", "lt_12345678") is None


@pytest.mark.parametrize(
    "fields",
    [{"team_id": "2"}, {"scopes": "inference"}, {"deployments": [1]}, {"expires_at": -1},
     {"quota": {"requests": -1}}, {"quota": {"bogus": 1}}, {"key_id": None}],
)  # fmt: skip
def test_signed_but_malformed_entries_open_to_none(fields: dict) -> None:
    key, prefix = key_generate()
    base = {"prefix": prefix, "digest": key_hash(key), "key_id": 5, "team_id": 2, "scopes": ["inference"],
            "deployments": [], "expires_at": None, "quota": {}} | fields  # fmt: skip
    body = json.dumps(base, sort_keys=True, separators=(",", ":"))
    entry = f"v1.{sign(CONSOLE, b'lantau-apikey-v1' + bytes([0]) + b'lantau', body.encode())}.{body}"
    assert entry_open(entry, VERIFY, "lantau", prefix) is None


def test_public_keys_round_trip_and_secrets_derive_independently() -> None:
    assert public_key_from_text(public_key_text(CONSOLE)).public_bytes_raw() == VERIFY.public_bytes_raw()
    for bad in ("", "abc", "!!!!"):
        with pytest.raises(ValueError):
            public_key_from_text(bad)
    assert derive_secret("s", "a") != derive_secret("s", "b") and len(derive_secret("s", "a")) == 32
    assert key_pepper(None, "s") == key_pepper("secret-key:s", "other") != key_pepper(None, "other")
    assert key_pepper("explicit", "s") == b"explicit"


def test_quota_refusal_names_the_spent_limit_and_the_reset() -> None:
    now = datetime(2026, 12, 31, 23, 59, 0, tzinfo=UTC)
    assert next_month_start(now) == datetime(2027, 1, 1, tzinfo=UTC)
    quota = Quota(requests=10, tokens=100)
    assert quota_refusal(quota, {"requests": 9, "tokens": 99}, now) is None
    assert quota_refusal(quota, {"requests": 10}, now) == QuotaRefusal(
        "monthly request quota of 10 spent; resets on 2027-01-01", 60
    )
    assert quota_refusal(quota, {"tokens": 100}, now).message.startswith("monthly token quota of 100 spent")
    assert quota_refusal(Quota(), {"requests": 10**9}, now) is None


def test_every_redis_key_is_under_the_configured_prefix() -> None:
    names = RedisKeys("installA")
    built = [names.api_key("ab" * 32), names.usage(3), names.rate_limit("3"), names.metrics_channel("colours"),
             names.metrics_last("colours", "r1"), names.metrics_last_pattern("colours")]  # fmt: skip
    assert all(name.startswith("installA:") for name in built)
    assert built[0] == "installA:apikey:" + "ab" * 32 and built[1] == "installA:usage:3"
    assert built[4] == "installA:metrics:last:colours:r1" and built[5] == "installA:metrics:last:colours:*"
    assert RedisKeys().api_key("x") == "lantau:apikey:x"  # the default prefix keeps today's names
    assert RedisKeys("b").api_key("x") != RedisKeys("installA").api_key("x")
    assert names.usage_month(3, "2026-12") == "installA:usage-month:3:2026-12"
    assert names.usage_rolling(3) == "installA:usage-rolling:3" and names.last_use(3) == "installA:lastuse:3"


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
