"""Usage per API key: rolled up from the runners' Redis counters into PostgreSQL, without double counting.

Runners add each key's requests, images and tokens to ``<p>:usage:<key_id>`` (not yet rolled up) and to
``<p>:usage-month:<key_id>:<YYYY-MM>`` (quotas), and note the last use in ``<p>:lastuse:<key_id>``.
``usage_rollup`` (Celery beat, every ``LANTAU_USAGE_ROLLUP_S``) moves them into ``ApiKeyUsage`` rows
(per key per UTC hour) in three idempotent steps:

1. one Lua step renames the pending hash to ``<p>:usage-rolling:<key_id>`` and stamps it with a new
   batch id, unless a rolling hash is already there (a previous run died), which is then reused as is;
2. one transaction adds the rolling counts to the hour's row and records the batch id in
   ``ApiKeyUsageBatch``; a batch id already recorded is skipped, so a rerun never adds twice;
3. after commit the rolling hash is deleted.

A Redis restart loses at most what was not yet rolled up (one interval). It also loses the month
counters that quotas read, so each run first seeds a missing month counter with the database's total
for the month, once per month hash (field ``seeded``), before adding its batches.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from accounts import keycache
from accounts.models import ApiKey, ApiKeyUsage, ApiKeyUsageBatch
from contract.quotas import USAGE_FIELDS, month_of, usage_from_redis

# KEYS[1] pending, KEYS[2] rolling; ARGV[1] new batch id. Returns the rolling hash (empty if none).
TAKE_PENDING = """
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('HSET', KEYS[2], 'batch', ARGV[1])
end
return redis.call('HGETALL', KEYS[2])
"""
# KEYS[1] month counter; ARGV requests, images, tokens, ttl. Adds the database's total once per hash.
SEED_MONTH = """
if redis.call('HSETNX', KEYS[1], 'seeded', '1') == 1 then
  redis.call('HINCRBY', KEYS[1], 'requests', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'images', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
MONTH_TTL_S = 40 * 86400
log = logging.getLogger(__name__)
BATCH_KEEP = timedelta(days=7)


def _pairs(flat: list) -> dict[str, str]:
    # Redis content is data: a field that is not UTF-8 becomes text that counts as 0 (usage_from_redis).
    return {
        flat[i].decode(errors="replace"): flat[i + 1].decode(errors="replace") for i in range(0, len(flat), 2)
    }


def month_start(now: datetime) -> datetime:
    now = now.astimezone(UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def month_totals_db(key_ids: list[int], now: datetime) -> dict[int, dict[str, int]]:
    """Rolled-up usage this UTC month per key (zeros for keys without any)."""
    rows = (
        ApiKeyUsage.objects.filter(api_key_id__in=key_ids, hour__gte=month_start(now))
        .values("api_key_id")
        .annotate(**{f: Sum(f) for f in USAGE_FIELDS})
    )
    out = {key_id: dict.fromkeys(USAGE_FIELDS, 0) for key_id in key_ids}
    for row in rows:
        sums: dict[str, Any] = dict(row)
        out[sums["api_key_id"]] = {f: int(sums[f] or 0) for f in USAGE_FIELDS}
    return out


def _rollable_keys(now: datetime) -> list[ApiKey]:
    # Revoked keys keep being rolled for a day: runners may flush a last batch after the revocation.
    return list(
        ApiKey.objects.filter(Q(revoked_at__isnull=True) | Q(revoked_at__gte=now - timedelta(days=1)))
    )


def _take(keys: list[ApiKey]) -> dict[int, dict[str, str]]:
    names, pipe = keycache.names(), keycache.client().pipeline(transaction=False)
    script = keycache.client().register_script(TAKE_PENDING)
    for api_key in keys:
        script(keys=[names.usage(api_key.pk), names.usage_rolling(api_key.pk)],
               args=[uuid.uuid4().hex], client=pipe)  # fmt: skip
    taken = {}
    for api_key, flat in zip(keys, pipe.execute(), strict=True):
        if flat:
            taken[api_key.pk] = _pairs(flat)
    return taken


def _seed_months(keys: list[ApiKey], now: datetime) -> None:
    # Every key, every run: a month counter then exists (seeded) from the first run of each month, so a
    # seed never adds batches that the runners had already counted into it.
    totals = month_totals_db([k.pk for k in keys], now)
    names, pipe = keycache.names(), keycache.client().pipeline(transaction=False)
    script = keycache.client().register_script(SEED_MONTH)
    for api_key in keys:
        t = totals[api_key.pk]
        script(keys=[names.usage_month(api_key.pk, month_of(now))],
               args=[t["requests"], t["images"], t["tokens"], MONTH_TTL_S], client=pipe)  # fmt: skip
    # A month hash that is not counters (written by something other than a runner) must not stop the
    # roll-up of every other key: it is dropped, and the next run seeds it again from the database.
    corrupt = [
        names.usage_month(api_key.pk, month_of(now))
        for api_key, result in zip(keys, pipe.execute(raise_on_error=False), strict=True)
        if isinstance(result, Exception)
    ]
    if corrupt:
        log.warning("usage: %d month counter(s) were not counters and were reset: %s", len(corrupt), corrupt)
        keycache.client().delete(*corrupt)


def _apply(key_id: int, counts: dict[str, str], hour: datetime) -> bool:
    """Add one rolling batch to the hour's row; False when this batch was already added."""
    batch = f"{key_id}:{counts.get('batch', '')}"
    amounts = usage_from_redis(counts)
    with transaction.atomic():
        _, created = ApiKeyUsageBatch.objects.get_or_create(batch=batch)
        if not created:
            return False
        ApiKeyUsage.objects.get_or_create(api_key_id=key_id, hour=hour)
        ApiKeyUsage.objects.filter(api_key_id=key_id, hour=hour).update(
            **{f: F(f) + v for f, v in amounts.items()}
        )
    return True


def _last_uses(keys: list[ApiKey]) -> None:
    names, pipe = keycache.names(), keycache.client().pipeline(transaction=False)
    for api_key in keys:
        pipe.hgetall(names.last_use(api_key.pk))
    for api_key, row in zip(keys, pipe.execute(), strict=True):
        try:
            at = datetime.fromtimestamp(float(row.get(b"at", b"")), tz=UTC)
        except ValueError:
            continue
        if api_key.last_used_at is None or at > api_key.last_used_at:
            address = row.get(b"addr", b"").decode() or None
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=at, last_used_address=address)


def usage_rollup(now: datetime | None = None) -> int:
    """Move every key's pending Redis usage into the database (see the module doc); returns how many
    batches were added. Safe to run twice or after a crash at any step."""
    now = now or timezone.now()
    keys = _rollable_keys(now)
    if not keys:
        return 0
    _seed_months(keys, now)  # before the batches: the seed is the total they are not yet part of
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    taken = _take(keys)
    added = sum(_apply(key_id, counts, hour) for key_id, counts in taken.items())
    if taken:
        names = keycache.names()
        keycache.client().delete(*[names.usage_rolling(key_id) for key_id in taken])
    _last_uses(keys)
    ApiKeyUsageBatch.objects.filter(created_at__lt=now - BATCH_KEEP).delete()
    return added


def pending_usage(key_ids: list[int]) -> dict[int, dict[str, int]]:
    """Usage counted by runners but not yet rolled up (pending plus an interrupted batch) per key."""
    names, pipe = keycache.names(), keycache.client().pipeline(transaction=False)
    for key_id in key_ids:
        pipe.hgetall(names.usage(key_id))
        pipe.hgetall(names.usage_rolling(key_id))
    rows = pipe.execute() if key_ids else []
    out = {}
    for i, key_id in enumerate(key_ids):
        pending, rolling = usage_from_redis(rows[2 * i]), usage_from_redis(rows[2 * i + 1])
        out[key_id] = {f: pending[f] + rolling[f] for f in USAGE_FIELDS}
    return out
