"""Every Redis key name Lantau uses outside Celery and Channels, always under the install's prefix.

The prefix is ``LANTAU_REDIS_PREFIX`` (default ``lantau``): the console reads it into
``settings.REDIS_PREFIX`` and hands it to node agents in each desired replica, and agents pass it to
runners (``--redis-prefix``). Two installs sharing one Redis therefore never see each other's keys.

Who may touch which of them is also enforced by Redis when the console runs with ``LANTAU_REDIS_ACL``:
edges, agents and each deployment's runners get ACL users with only these patterns (``contract.redis_acl``).

Writers and readers:
  ``<p>:apikey:<key prefix>``   signed entry or tombstone (contract.apikeys): console writes (accounts.keycache);
                                 gateway and runners read (the management API checks the database)
  ``<p>:apikey-rev:<key prefix>``  signed revision floor of that key (contract.apikeys), no TTL: console
                                 writes, gateway and runners read; entries below it are refused (replays)
  ``<p>:apikeys:changed``        a random token the console sets whenever a key is created or revoked:
                                 the gateway reloads its set of known key prefixes when it changes
  ``<p>:usage:<key_id>``         usage not yet rolled up: runners HINCRBY (runner.usage); the console's
                                 roll-up (accounts.usage) renames it to ``<p>:usage-rolling:<key_id>``
  ``<p>:usage-month:<key_id>:<YYYY-MM>``  this month's usage for quotas: runners HINCRBY, gateway/runners read
  ``<p>:quota-reserved:<key_id>``  quota held by requests in flight, per minute of admission: runners
                                 reserve and settle (runner.usage), the gateway and edges read it with the month
  ``<p>:lastuse:<key_id>``       last use time and address: runners and the gateway HSET, the roll-up reads
  ``<p>:ratelimit:<key_id>``     token bucket shared by runners and the gateway (runner.ratelimit)
  ``<p>:metrics:<deployment>``   pub/sub channel: runners publish a sealed summary (contract.summaries) each
                                 second; the console's websocket reads
  ``<p>:metrics:last:<deployment>:<replica>``  the last sealed summary per replica (runners SET, the console
                                 MGETs the replicas it knows)
  ``<p>:routes``                 hash of signed route entries by deployment (contract.routes): the console
                                 writes (inference.routes_publish), edges read
  ``<p>:routes:changed``         pub/sub: a deployment's name (or ``*``) after its entry changed
  ``<p>:nodes:seen``             sorted set node name -> last heartbeat (unix s): the console ZADDs on each
                                 heartbeat and its sweep reads it (liveness without a PostgreSQL write)
  ``<p>:nodes:inventory:<node>`` the node's last reported inventory, JSON (console SETs with a TTL)
  ``<p>:nodestats:<node>``       recent heartbeat figures of one node, a capped list (console RPUSHes on
                                 each heartbeat; the node page's websocket back-fills charts from it)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_PREFIX = "lantau"
PREFIX_ENV = "LANTAU_REDIS_PREFIX"
# No glob characters (the metrics scan pattern would match other installs) and no whitespace.
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key names under one prefix; build it once from the configured prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ValueError(
                f"Redis prefix {self.prefix!r} is not allowed: use up to 64 letters, digits, '_', '.', ':' or '-'"
            )

    def api_key(self, key_prefix: str) -> str:
        return f"{self.prefix}:apikey:{key_prefix}"

    def api_key_floor(self, key_prefix: str) -> str:
        return f"{self.prefix}:apikey-rev:{key_prefix}"

    def sandbox_workers(self) -> str:
        """Hash worker host -> its sandbox state, JSON (the worker writes it at start; /readyz shows it)."""
        return f"{self.prefix}:sandbox:workers"

    def api_keys_changed(self) -> str:
        return f"{self.prefix}:apikeys:changed"

    def usage(self, key_id: int | str) -> str:
        return f"{self.prefix}:usage:{key_id}"

    def usage_rolling(self, key_id: int | str) -> str:
        return f"{self.prefix}:usage-rolling:{key_id}"

    def usage_month(self, key_id: int | str, month: str) -> str:
        return f"{self.prefix}:usage-month:{key_id}:{month}"

    def quota_reserved(self, key_id: int | str) -> str:
        return f"{self.prefix}:quota-reserved:{key_id}"

    def last_use(self, key_id: int | str) -> str:
        return f"{self.prefix}:lastuse:{key_id}"

    def rate_limit(self, key_id: int | str) -> str:
        return f"{self.prefix}:ratelimit:{key_id}"

    def metrics_channel(self, deployment: str) -> str:
        return f"{self.prefix}:metrics:{deployment}"

    def metrics_last(self, deployment: str, replica: str) -> str:
        return f"{self.prefix}:metrics:last:{deployment}:{replica}"

    def nodes_seen(self) -> str:
        return f"{self.prefix}:nodes:seen"

    def node_inventory(self, node: str) -> str:
        return f"{self.prefix}:nodes:inventory:{node}"

    def node_stats(self, node: str) -> str:
        return f"{self.prefix}:nodestats:{node}"

    def routes(self) -> str:
        return f"{self.prefix}:routes"

    def routes_channel(self) -> str:
        return f"{self.prefix}:routes:changed"

    def wake(self, deployment: str) -> str:
        """Set (NX, a few seconds) by the edge or gateway that asked a scaled-to-zero deployment to wake."""
        return f"{self.prefix}:wake:{deployment}"

    def celery_keyprefix(self) -> str:
        """Celery's broker keys (console settings' ``global_keyprefix``; an edge sends wake tasks there)."""
        return f"{self.prefix}:celery:"

    def metrics_last_pattern(self, deployment: str) -> str:
        """SCAN pattern for every replica's last summary of ``deployment``."""
        return f"{self.prefix}:metrics:last:{deployment}:*"
