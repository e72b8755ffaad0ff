"""Celery tasks for accounts: thin wrappers around services."""

from celery import shared_task

from accounts.services import api_keys_sync
from accounts.usage import usage_rollup


@shared_task(name="accounts.tasks.api_keys_sync")
def api_keys_sync_task() -> int:
    """Keep the API-key cache that runners trust in step with the database (every minute)."""
    return api_keys_sync()


@shared_task(name="accounts.tasks.api_key_usage_rollup")
def api_key_usage_rollup_task() -> int:
    """Roll the runners' usage counters up into PostgreSQL (every LANTAU_USAGE_ROLLUP_S)."""
    return usage_rollup()
