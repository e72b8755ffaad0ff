"""The runner's key checks in-process, against a Redis that is not there: keys with limits fail closed
(503 `unavailable`), a runner without the console's public key refuses every key, and one without limits
is never asked about them."""

from __future__ import annotations

import asyncio

import pytest
from redis import asyncio as aioredis

from contract.apikeys import KeyIdentity, key_generate
from contract.quotas import Quota
from contract.redis_keys import RedisKeys
from inference.runner.errors import Unavailable
from inference.runner.keys import KeyCache
from inference.runner.ratelimit import RateLimiter
from inference.runner.usage import UsageRecorder
from tests.support.ports import free_port


def unreachable() -> aioredis.Redis:
    return aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)


def test_a_rate_limited_key_is_refused_with_503_while_redis_is_down() -> None:
    async def scenario() -> None:
        redis = unreachable()
        try:
            with pytest.raises(Unavailable) as caught:
                await RateLimiter(redis, RedisKeys()).acquire("1", 5.0, 5)
            assert caught.value.status == 503 and caught.value.headers["Retry-After"] == "1"
        finally:
            await redis.aclose()

    asyncio.run(scenario())


def test_a_quota_is_refused_with_503_while_redis_is_down_and_no_quota_never_asks() -> None:
    async def scenario() -> None:
        redis = unreachable()
        recorder = UsageRecorder(redis, RedisKeys())
        try:
            assert await recorder.quota_refusal(KeyIdentity("1", 1, ("inference",))) is None
            with pytest.raises(Unavailable):
                await recorder.quota_refusal(KeyIdentity("1", 1, ("inference",), quota=Quota(requests=5)))
        finally:
            await redis.aclose()

    asyncio.run(scenario())


def test_without_the_consoles_public_key_every_key_is_refused_without_asking_redis() -> None:
    async def scenario() -> None:
        redis = unreachable()  # would raise Unavailable if it were asked
        try:
            assert await KeyCache(redis, RedisKeys(), verify_key=None).lookup(key_generate()[0]) is None
        finally:
            await redis.aclose()

    asyncio.run(scenario())
