"""The edge's command line and environment. Secrets come from the environment (or a file), never argv."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

from contract.redis_keys import DEFAULT_PREFIX, PREFIX_ENV, RedisKeys
from contract.routes import EDGE_KEY_ENV, edge_key_from_text
from contract.signing import Ed25519PublicKey, public_key_from_text

VERIFY_KEY_ENV = "LANTAU_KEY_VERIFY_KEY"
REDIS_URL_ENV = "LANTAU_REDIS_URL"
_REGION = re.compile(r"^[a-z0-9-]{1,32}$")


@dataclass(frozen=True)
class EdgeConfig:
    region: str
    host: str
    port: int
    redis_url: str
    names: RedisKeys
    verify_key: Ed25519PublicKey
    edge_key: bytes
    timeout_s: float
    breaker_failures: int
    breaker_open_s: float
    refresh_s: float
    max_body_bytes: int
    max_json_depth: int
    max_inflight_per_deployment: int
    max_inflight_per_team: int
    cold_start_timeout_s: float = 120.0
    max_answer_bytes: int = 4 * 10 * 1024**2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m inference.edge", description="Lantau's regional edge.")
    p.add_argument("--region", required=True, help="this edge's region (hk, us): its replicas come first")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port (see the listening line)")
    p.add_argument("--redis-url", default=os.environ.get(REDIS_URL_ENV, ""), help=f"or {REDIS_URL_ENV}")
    p.add_argument("--redis-prefix", default=os.environ.get(PREFIX_ENV, DEFAULT_PREFIX))
    p.add_argument("--key-verify-key", default=os.environ.get(VERIFY_KEY_ENV, ""),
                   help=f"the console's public key for signed entries (or {VERIFY_KEY_ENV})")  # fmt: skip
    p.add_argument("--edge-key-file", type=Path, help=f"a file holding the edge key (else {EDGE_KEY_ENV})")
    p.add_argument("--timeout-s", type=float, default=60.0, help="upstream timeout; past it: 504")
    p.add_argument("--breaker-failures", type=int, default=3, help="consecutive failures that open a breaker")
    p.add_argument("--breaker-open-s", type=float, default=5.0, help="how long before the probe")
    p.add_argument("--refresh-s", type=float, default=30.0, help="full route re-read (a safety net)")
    p.add_argument("--max-body-bytes", type=int, default=10 * 1024**2)
    p.add_argument("--max-answer-bytes", type=int, default=0,
                   help="largest replica answer relayed (502 above) and longest stream line; "
                        "0: 4 x --max-body-bytes")  # fmt: skip
    p.add_argument("--max-json-depth", type=int, default=32)
    p.add_argument("--max-inflight-per-deployment", type=int, default=256)
    p.add_argument("--max-inflight-per-team", type=int, default=512)
    p.add_argument("--cold-start-timeout-s", type=float, default=120.0,
                   help="how long a request to a deployment scaled to zero is held; past it: 503")  # fmt: skip
    return p


def parse_args(argv: list[str] | None = None) -> EdgeConfig:
    """The configuration, or exit 2 with the reason (before listening)."""
    parser = _parser()
    a = parser.parse_args(argv)
    if not _REGION.match(a.region):
        parser.error("--region: lowercase letters, digits and dashes")
    if not a.redis_url:
        parser.error(f"--redis-url or {REDIS_URL_ENV} is required: routes and keys come from Redis")
    try:
        names = RedisKeys(a.redis_prefix)
        verify_key = public_key_from_text(a.key_verify_key)
    except ValueError as exc:
        parser.error(f"{exc} (--redis-prefix / --key-verify-key)")
    text = a.edge_key_file.read_text() if a.edge_key_file else os.environ.get(EDGE_KEY_ENV, "")
    try:
        edge_key = edge_key_from_text(text)
    except ValueError as exc:
        parser.error(f"{exc}: set {EDGE_KEY_ENV} or --edge-key-file (manage.py edge_env prints it)")
    if a.timeout_s <= 0 or a.breaker_failures < 1 or a.breaker_open_s <= 0 or a.refresh_s <= 0:
        parser.error("timeouts, breaker settings and the refresh period must be positive")
    if not 0 < a.cold_start_timeout_s <= 3600:
        parser.error("--cold-start-timeout-s must be between 0 and 3600")
    if a.max_answer_bytes < 0:
        parser.error("--max-answer-bytes must be 0 (4 x --max-body-bytes) or positive")
    return EdgeConfig(
        a.region, a.host, a.port, a.redis_url, names, verify_key, edge_key, a.timeout_s, a.breaker_failures,
        a.breaker_open_s, a.refresh_s, a.max_body_bytes, a.max_json_depth, a.max_inflight_per_deployment,
        a.max_inflight_per_team, a.cold_start_timeout_s, a.max_answer_bytes or 4 * a.max_body_bytes,
    )  # fmt: skip
