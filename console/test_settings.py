"""Settings for the test suite: the real settings with a throwaway secret (tests never use production keys)."""

import os

os.environ.setdefault("SECRET_KEY", "lantau-test-suite-" + os.urandom(8).hex())
# Parallel workers (pytest-xdist) share one Redis: each gets its own prefix, so counters keyed by
# database ids (rate limits, usage) and deployment names never mix between their databases.
# The run's id too: Redis outlives the run, and counters keyed by ids a new test database hands out
# again must not meet an earlier run's (tests/conftest.py deletes the prefix's keys at the end).
if os.environ.get("PYTEST_XDIST_WORKER"):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    os.environ["LANTAU_REDIS_PREFIX"] = f"lantau-test-{run}-{os.environ['PYTEST_XDIST_WORKER']}"

from console.settings import *  # noqa: E402,F403
