"""Redis ACL users with the least each process needs: edges, runners (one user per deployment) and agents.

Each rule list is ``ACL SETUSER`` arguments (and, with ``acl_file_line``, a line of a Redis ACL file),
derived from what the processes' code sends (``contract.redis_keys`` names every key):

* the edge (``inference.edge``): reads route entries (``HGETALL``/``HGET <p>:routes``, ``SUBSCRIBE
  <p>:routes:changed``) and key entries with their floors (``MGET``); runs the shared token bucket
  (``inference.runner.ratelimit``) and the quota check (``inference.runner.usage.quota_check``: it drops
  reservations that aged out); writes last use (``HSET <p>:lastuse:*``) and wake requests (``SET NX
  <p>:wake:*``, ``LPUSH`` of one message on the console's Celery queue ``<p>:celery:celery``).
* the runner of deployment ``d`` (``inference.runner.edge``): reads key entries; the token bucket; quota
  admission and settling (``<p>:usage-month:*``, ``<p>:quota-reserved:*``); ``HINCRBY <p>:usage:*``;
  ``HSET <p>:lastuse:*``; its live summaries only (``PUBLISH <p>:metrics:d``, ``SET
  <p>:metrics:last:d:*``). Never another deployment's summaries, routes, nodes, Celery or the cache.
* the agent (``inference.agent``) talks to Redis only through its runners and edge, which get their
  own users; its own user may ``PING`` and nothing else (the URL says where Redis is).

The console keeps its own URL (``REDIS_URL``: Celery, Channels, the cache, every key): it is the one
that runs ``ACL SETUSER``. Redis 7 gets read (``%R~``) and write (``%W~``) key permissions and
selectors, so each command reaches only the keys it is used on; Redis 6.2 has neither, and its rules
(``selectors=False``) are the union: the same keys and commands, any command on any of the keys.

Passwords are derived (``password_for``: HMAC-SHA256 of the console's secret over user and epoch), so
the console hands them out without storing them, and a new epoch rotates every one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from .redis_keys import RedisKeys

EDGE, RUNNER, AGENT = "edge", "runner", "agent"
KINDS = (EDGE, RUNNER, AGENT)
# The edge environment's credentials (``inference.routes_publish.edge_environment``), which an agent puts
# on its own Redis URL; runners get theirs as ``redis_user``/``redis_password`` in a desired replica.
REDIS_USER_ENV, REDIS_PASSWORD_ENV = "LANTAU_REDIS_USER", "LANTAU_REDIS_PASSWORD"
_DEPLOYMENT = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")  # node_join.NAME_RE's shape: no glob
_BASE = ("+ping", "+select")  # health checks, the URL's database; AUTH and HELLO need none
_SCRIPTS = ("+evalsha", "+eval", "+script|load", "+time")  # redis-py's Script, and the scripts' clock


@dataclass(frozen=True, slots=True)
class Grant:
    """Commands allowed on some keys: ``read``/``write`` patterns (Redis 7's ``%R~``/``%W~``), ``both``
    (``~``). One grant is one selector on Redis 7; on 6.2 every grant is merged into the user's root."""

    commands: tuple[str, ...]
    both: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()

    def keys(self, *, selectors: bool) -> list[str]:
        if not selectors:
            return [f"~{p}" for p in (*self.both, *self.read, *self.write)]
        return [f"~{p}" for p in self.both] + [f"%R~{p}" for p in self.read] + [f"%W~{p}" for p in self.write]


def user_name(prefix: str, kind: str, deployment: str | None = None) -> str:
    """``<prefix>-edge``, ``<prefix>-agent`` or ``<prefix>-runner-<deployment>``."""
    RedisKeys(prefix)  # validates the prefix
    if kind not in KINDS:
        raise ValueError(f"unknown Redis user kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == RUNNER:
        if not deployment or not _DEPLOYMENT.match(deployment):
            raise ValueError(f"a runner user needs a deployment name, not {deployment!r}")
        return f"{prefix}-runner-{deployment}"
    return f"{prefix}-{kind}"


def _key_entries(k: RedisKeys) -> Grant:
    return Grant(("+mget",), read=(k.api_key("*"), k.api_key_floor("*")))


def _metering(k: RedisKeys, *, runner: bool) -> list[Grant]:
    """The token bucket and the quota script (``inference.runner.ratelimit``, ``.usage``): EVAL needs read
    and write on the keys it is given; inside, each call is checked again (only runners add usage)."""
    bucket, month, held = k.rate_limit("*"), k.usage_month("*", "*"), k.quota_reserved("*")
    grants = [
        Grant(_SCRIPTS[:3], both=(bucket, month, held)),
        Grant(("+hmget", "+hset", "+pexpire"), both=(bucket,)),
        Grant(
            ("+hgetall", "+hdel", "+hincrby", "+expire") if runner else ("+hgetall", "+hdel"), both=(held,)
        ),
        Grant(("+hget", "+hincrby", "+expire"), both=(month,))
        if runner
        else Grant(("+hget",), read=(month,)),
        Grant(("+hset",), write=(k.last_use("*"),)),
    ]
    if runner:
        grants.append(Grant(("+hincrby",), both=(k.usage("*"),)))
    return grants


def _grants(prefix: str, kind: str, deployment: str | None) -> tuple[list[Grant], list[str]]:
    """(grants, channels) of one kind of process."""
    k = RedisKeys(prefix)
    if kind == EDGE:
        grants = [
            _key_entries(k),
            Grant(("+hgetall", "+hget"), read=(k.routes(),)),
            *_metering(k, runner=False),
            Grant(("+set",), write=(k.wake("*"),)),
            Grant(("+lpush",), write=(k.celery_keyprefix() + "celery",)),  # contract.wake.wake_queue_key
        ]
        return grants, [k.routes_channel()]
    if kind == RUNNER:
        assert deployment is not None
        grants = [
            _key_entries(k),
            *_metering(k, runner=True),
            Grant(("+set",), write=(k.metrics_last(deployment, "*"),)),
        ]
        return grants, [k.metrics_channel(deployment)]
    return [], []


def acl_rules(prefix: str, kind: str, deployment: str | None = None, *, selectors: bool = True) -> list[str]:
    """The user's rules after ``reset on`` and its password: keys, channels and commands. With
    ``selectors`` (Redis 7) the first grant is the root and each other one a selector ``(...)``."""
    user_name(prefix, kind, deployment)  # validates
    grants, channels = _grants(prefix, kind, deployment)
    channel_commands = ("+subscribe", "+unsubscribe") if kind == EDGE else ("+publish",) if channels else ()
    root = ["resetkeys", "resetchannels", *(f"&{c}" for c in channels), "-@all", *_BASE, *channel_commands]
    if not grants:
        return root
    root.append("+time")  # the scripts' clock: a command without keys belongs to the root
    if not selectors:
        keys = list(dict.fromkeys(p for g in grants for p in g.keys(selectors=False)))
        commands = list(dict.fromkeys(c for g in grants for c in g.commands if c not in root))
        return [*root, *keys, *commands]
    first, *rest = grants
    root += [*first.keys(selectors=True), *first.commands]
    return root + [f"({' '.join([*g.keys(selectors=True), *g.commands])})" for g in rest]


def password_for(secret: str, user: str, epoch: str) -> str:
    """The user's password: HMAC-SHA256(secret, ``user:epoch``), hex. A new epoch rotates them all."""
    return hmac.new(secret.encode(), f"{user}:{epoch}".encode(), hashlib.sha256).hexdigest()


def setuser_args(user: str, password: str, rules: list[str]) -> list[str]:
    """``ACL SETUSER`` arguments that replace whatever the user was (idempotent)."""
    return [user, "reset", "on", f"#{hashlib.sha256(password.encode()).hexdigest()}", *rules]


def acl_file_line(user: str, password: str, rules: list[str]) -> str:
    """One line of a Redis ACL file (``aclfile``); the password is stored as its SHA-256 only."""
    return " ".join(["user", user, *setuser_args(user, password, rules)[1:]])


def selectors_supported(version: str) -> bool:
    """Whether a server of ``version`` (``INFO server``'s ``redis_version``) has selectors and %R~/%W~."""
    try:
        return int(version.split(".", 1)[0]) >= 7
    except ValueError:
        return False


def url_with_user(url: str, user: str, password: str) -> str:
    """``url`` (host, port, database, TLS) with these credentials instead of its own."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # unix:///path.sock?db=0&username=u&password=p (redis-py's form)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in {"username", "password"}]
        return f"unix://{parts.path}?{urlencode([*query, ('username', user), ('password', password)])}"
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
