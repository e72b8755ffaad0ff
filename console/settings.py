"""Django settings for Lantau, read from the environment (see docs/configuration.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from contract.redis_keys import RedisKeys
from contract.signing import key_pepper
from core.env import (
    ConfigError,
    check_redis_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent


def _fail(message: str) -> NoReturn:
    # A clear one-line message instead of a traceback for configuration mistakes.
    sys.stderr.write(f"lantau: configuration error: {message}\n")
    raise SystemExit(2)


try:
    DEBUG = env_bool("LANTAU_DEBUG", False)
    DATA_DIR = Path(env_str("LANTAU_DATA_DIR", str(BASE_DIR / "var"))).resolve()
    _secret = env_str("SECRET_KEY")
    _secret_file = DATA_DIR / "secret_key"  # written (mode 0600) by the quick start on its first run
    if not _secret and _secret_file.is_file():
        _secret = _secret_file.read_text().strip()
    if not _secret:
        if not DEBUG:
            raise ConfigError("SECRET_KEY is not set (set it, or LANTAU_DEBUG=1 for a development-only key)")
        _secret = "lantau-development-only-key-do-not-use-in-production"
    SECRET_KEY = _secret  # a str from here on (mypy's Django plugin reads the settings' types)
    ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
    CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
    DATABASES = {
        "default": parse_database_url(env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lantau"))
    }
    REDIS_URL = check_redis_url(env_str("REDIS_URL", "redis://127.0.0.1:6379/0"))
    # Namespaces Celery's queues, the Channels layer and the cache, so installs can share one Redis.
    REDIS_PREFIX = env_str("LANTAU_REDIS_PREFIX", "lantau")
    # Redis ACL users per kind of process (inference.services.redis_users; docs/deployment.md, "Redis
    # users"): edges, agents and runners get their own least-privilege credentials instead of REDIS_URL's.
    # Passwords are HMAC(SECRET_KEY, user:epoch): a new LANTAU_REDIS_ACL_EPOCH rotates every one.
    REDIS_ACL = env_bool("LANTAU_REDIS_ACL", False)
    REDIS_ACL_EPOCH = env_str("LANTAU_REDIS_ACL_EPOCH", "1")
    STORAGE_DIR = Path(env_str("LANTAU_STORAGE_DIR", str(DATA_DIR / "storage"))).resolve()
    MAX_UPLOAD_BYTES = env_int("LANTAU_MAX_UPLOAD_BYTES", 2 * 1024**3, minimum=1024)
    # Untrusted models (docs/security.md, "Untrusted models"): archive limits, free space kept, sandbox.
    ARCHIVE_MAX_BYTES = env_int("LANTAU_ARCHIVE_MAX_BYTES", 8 * 1024**3, minimum=1024)
    ARCHIVE_MAX_FILES = env_int("LANTAU_ARCHIVE_MAX_FILES", 1000, minimum=1)
    STORAGE_MIN_FREE_BYTES = env_int("LANTAU_STORAGE_MIN_FREE_BYTES", 1024**3, minimum=0)
    SANDBOX_MEMORY_BYTES = env_int("LANTAU_SANDBOX_MEMORY_BYTES", 4 * 1024**3, minimum=256 * 1024**2)
    SANDBOX_CPU_S = env_int("LANTAU_SANDBOX_CPU_S", 7200, minimum=10)
    SANDBOX_TIMEOUT_S = env_int("LANTAU_SANDBOX_TIMEOUT_S", 3600, minimum=10)
    SANDBOX_FILE_BYTES = env_int("LANTAU_SANDBOX_FILE_BYTES", 16 * 1024**3, minimum=1024**2)
    SANDBOX_USER = env_str("LANTAU_SANDBOX_USER", "nobody")
    # Fail closed (security review H-C): model jobs are refused where the sandbox cannot drop to another
    # uid and isolate the network. Default on, off for a LANTAU_DEBUG=1 development run (which warns);
    # LANTAU_SANDBOX_UNSAFE=1 accepts the risk explicitly.
    SANDBOX_REQUIRE_ISOLATION = env_bool("LANTAU_SANDBOX_REQUIRE_ISOLATION", not DEBUG)
    SANDBOX_UNSAFE = env_bool("LANTAU_SANDBOX_UNSAFE", False)
    # Validation datasets (issue 12; docs/quantization.md, "Validation datasets"): upload caps.
    DATASET_MAX_BYTES = env_int("LANTAU_DATASET_MAX_BYTES", 1024**3, minimum=1024)
    DATASET_MAX_EXPANDED_BYTES = env_int("LANTAU_DATASET_MAX_EXPANDED_BYTES", 4 * 1024**3, minimum=1024)
    DATASET_MAX_ITEMS = env_int("LANTAU_DATASET_MAX_ITEMS", 20_000, minimum=1)
    DATASET_MAX_IMAGE_PIXELS = env_int("LANTAU_DATASET_MAX_IMAGE_PIXELS", 40_000_000, minimum=10_000)
    DATASET_MAX_TOTAL_PIXELS = env_int("LANTAU_DATASET_MAX_TOTAL_PIXELS", 8_000_000_000, minimum=10_000)
    MAX_PREDICT_BYTES = env_int("LANTAU_MAX_PREDICT_BYTES", 10 * 1024**2, minimum=1024)
    # The largest replica answer the gateway relays (502 above), and the longest line of a stream
    # (review finding L-G); edges take the same as --max-answer-bytes.
    MAX_ANSWER_BYTES = env_int("LANTAU_MAX_ANSWER_BYTES", 4 * MAX_PREDICT_BYTES, minimum=1024)
    # Fleet (issue 9; docs/configuration.md, "Nodes"): a node is "Not ready" after this many seconds
    # without a heartbeat; the sweep looks every NODE_SWEEP_S; a heartbeat writes its node's row at
    # most every NODE_PERSIST_EVERY_S unless something changed (liveness lives in Redis); blobs no
    # version, dataset or job uses are deleted once older than BLOB_GC_GRACE_S.
    NODE_OFFLINE_AFTER_S = env_int("LANTAU_NODE_OFFLINE_AFTER_S", 10, minimum=2)
    NODE_SWEEP_S = env_int("LANTAU_NODE_SWEEP_S", 2, minimum=1)
    NODE_PERSIST_EVERY_S = env_int("LANTAU_NODE_PERSIST_EVERY_S", 30, minimum=1)
    BLOB_GC_GRACE_S = env_int("LANTAU_BLOB_GC_GRACE_S", 24 * 3600, minimum=60)
    BLOB_GC_EVERY_S = env_int("LANTAU_BLOB_GC_EVERY_S", 3600, minimum=60)
    GATEWAY_TIMEOUT_S = env_int("LANTAU_GATEWAY_TIMEOUT_S", 60, minimum=1)
    # Request limits of the data plane (docs/security.md, "Data plane"); node agents pass them to runners.
    MAX_JSON_DEPTH = env_int("LANTAU_MAX_JSON_DEPTH", 32, minimum=4, maximum=1000)
    MAX_PROMPT_BYTES = env_int("LANTAU_MAX_PROMPT_BYTES", 1024**2, minimum=1024)
    MAX_MESSAGES = env_int("LANTAU_MAX_MESSAGES", 256, minimum=1)
    MAX_STOP_STRINGS = env_int("LANTAU_MAX_STOP_STRINGS", 4, minimum=1, maximum=64)
    MAX_INPUTS = env_int("LANTAU_MAX_INPUTS", 256, minimum=1)
    MAX_IMAGE_PIXELS = env_int("LANTAU_MAX_IMAGE_PIXELS", 40_000_000, minimum=10_000)
    GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT = env_int(
        "LANTAU_GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT", 256, minimum=1
    )
    GATEWAY_MAX_INFLIGHT_PER_TEAM = env_int("LANTAU_GATEWAY_MAX_INFLIGHT_PER_TEAM", 512, minimum=1)
    # Traffic / regional edge (issue 10; docs/architecture.md, "Edge"): the console's `/v1/` prefers
    # replicas of this region ("" = none), and route tables are rewritten for edges this often.
    GATEWAY_REGION = env_str("LANTAU_GATEWAY_REGION", "")
    ROUTES_REPUBLISH_S = env_int("LANTAU_ROUTES_REPUBLISH_S", 10, minimum=1)
    # Rollouts (services.rollouts): one whose new replicas show no progress (none more ready) for this
    # long is rolled back, as one whose new replica fails is at once.
    ROLLOUT_READY_TIMEOUT_S = env_int("LANTAU_ROLLOUT_READY_TIMEOUT_S", 600, minimum=5)
    # ... and one whose new replicas answer more than ROLLOUT_MAX_ERROR_PERCENT of at least
    # ROLLOUT_MIN_REQUESTS requests with 5xx (sampled every ROLLOUT_WATCH_S) too; with ROLLOUT_BAKE_S,
    # the first new replica serves beside the old ones that long before any old one retires.
    ROLLOUT_MAX_ERROR_PERCENT = env_int("LANTAU_ROLLOUT_MAX_ERROR_PERCENT", 10, minimum=1, maximum=100)
    ROLLOUT_MIN_REQUESTS = env_int("LANTAU_ROLLOUT_MIN_REQUESTS", 20, minimum=1)
    ROLLOUT_WATCH_S = env_int("LANTAU_ROLLOUT_WATCH_S", 2, minimum=1)
    # On by default: a version that loads but fails requests is caught while the old one still serves.
    ROLLOUT_BAKE_S = env_int("LANTAU_ROLLOUT_BAKE_S", 60, minimum=0)
    # Autoscaling (services.autoscale): celery beat samples the runners' summaries this often and
    # decides on the samples of the last AUTOSCALE_WINDOW_S.
    AUTOSCALE_EVERY_S = env_int("LANTAU_AUTOSCALE_EVERY_S", 5, minimum=1)
    AUTOSCALE_WINDOW_S = env_int("LANTAU_AUTOSCALE_WINDOW_S", 30, minimum=1)
    # A request to a deployment scaled to zero is held this long while a replica starts, then 503.
    COLD_START_TIMEOUT_S = env_int("LANTAU_COLD_START_TIMEOUT_S", 120, minimum=1, maximum=3600)
    APIKEY_CACHE_TTL_S = env_int("LANTAU_APIKEY_CACHE_TTL_S", 0, minimum=0)  # 0: until revoked
    # API-key secrets (docs/security.md, "API keys"): both default to HKDF of SECRET_KEY, so the quick
    # start writes nothing new; set them explicitly to rotate SECRET_KEY without breaking keys.
    KEY_PEPPER = key_pepper(env_str("LANTAU_KEY_PEPPER"), SECRET_KEY)
    KEY_PEPPERS_PREVIOUS = [key_pepper(p, SECRET_KEY) for p in env_list("LANTAU_KEY_PEPPER_PREVIOUS", [])]
    CACHE_SIGNING_KEY = env_str("LANTAU_CACHE_SIGNING_KEY") or SECRET_KEY  # HKDF'd: contract.signing
    APIKEY_NEGATIVE_TTL_S = env_int("LANTAU_APIKEY_NEGATIVE_TTL_S", 30, minimum=1, maximum=3600)
    APIKEY_TOMBSTONE_TTL_S = env_int("LANTAU_APIKEY_TOMBSTONE_TTL_S", 86400, minimum=60)
    USAGE_ROLLUP_S = env_int("LANTAU_USAGE_ROLLUP_S", 60, minimum=5, maximum=3600)
    JOB_HEARTBEAT_STALE_S = env_int("LANTAU_JOB_HEARTBEAT_STALE_S", 45, minimum=5)
    WORKER_CONCURRENCY = env_int("LANTAU_WORKER_CONCURRENCY", 2, minimum=1, maximum=64)
    # People and hardening (docs/security.md, "People and roles", "Hardening").
    INVITATION_TTL_S = env_int("LANTAU_INVITATION_TTL_S", 7 * 86400, minimum=60)
    LOGIN_MAX_FAILURES = env_int("LANTAU_LOGIN_MAX_FAILURES", 5, minimum=1, maximum=1000)
    LOGIN_WINDOW_S = env_int("LANTAU_LOGIN_WINDOW_S", 900, minimum=1)
    TRUSTED_PROXIES = env_list("LANTAU_TRUSTED_PROXIES", [])
    # Teams may bring nodes of their own (join tokens made by a team's owners and admins): such a node
    # serves that team alone. Off: only install administrators add nodes (accounts.install_admin).
    TEAM_NODES = env_bool("LANTAU_TEAM_NODES", False)
    # Heartbeats from credentials that did not authenticate recently: database checks a second, all
    # sources together (review M-E); beyond it such heartbeats get 503 with Retry-After and no query.
    HEARTBEAT_UNKNOWN_PER_S = env_int("LANTAU_HEARTBEAT_UNKNOWN_PER_S", 50, minimum=1, maximum=10_000)
    # Websockets (review M-G, L-C): sockets one person may hold open per console process, and how often
    # an open socket checks again that its session, membership and role still allow it.
    WS_PER_USER = env_int("LANTAU_WS_PER_USER", 20, minimum=1, maximum=1000)
    WS_RECHECK_S = env_int("LANTAU_WS_RECHECK_S", 10, minimum=1, maximum=3600)
    ADMIN_ENABLED = env_bool("LANTAU_ADMIN", False)
    HTTPS = env_bool("LANTAU_HTTPS", False)
    SSL_REDIRECT = env_bool("LANTAU_SSL_REDIRECT", HTTPS)
    HSTS_SECONDS = env_int("LANTAU_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
    HSTS_PRELOAD = env_bool("LANTAU_HSTS_PRELOAD", False)
    CSP_ENABLED = env_bool("LANTAU_CSP", True)
    # Playground (issue 11; docs/configuration.md): lifetime of the short-lived key the console mints for
    # the signed-in person's browser, and how many of them one person may hold per team at once.
    PLAYGROUND_KEY_TTL_S = env_int("LANTAU_PLAYGROUND_KEY_TTL_S", 600, minimum=60, maximum=3600)
    PLAYGROUND_KEYS_PER_PERSON = env_int("LANTAU_PLAYGROUND_KEYS_PER_PERSON", 5, minimum=1, maximum=100)
except ConfigError as exc:
    _fail(str(exc))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",
    "console",
    "accounts",
    "inference",
    "evalsets",  # validation datasets (issue 12)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.middleware.ContentSecurityPolicyMiddleware",
    "console.middleware.RequestAddressMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.current_team",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "console:dashboard"
LOGOUT_REDIRECT_URL = "accounts:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = None  # no collectstatic step: see WHITENOISE_USE_FINDERS
# Static files are few and small: WhiteNoise serves them straight from the source folders (no collectstatic step).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Uploads larger than this spill to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024**2
FILE_UPLOAD_TEMP_DIR = None
DATA_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024**2

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# LANTAU_HTTPS=1: the console is reached over TLS (usually through a proxy that terminates it and
# sets X-Forwarded-Proto). Cookies then travel only over TLS and browsers are told to stay on it.
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_SSL_REDIRECT = SSL_REDIRECT
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = HSTS_SECONDS
SECURE_HSTS_INCLUDE_SUBDOMAINS = HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = HSTS_PRELOAD
# Preloading is the domain owner's decision (it is hard to undo), so it stays opt-in and its
# `check --deploy` reminder is silenced; every other deploy check must pass.
SILENCED_SYSTEM_CHECKS = [] if HSTS_PRELOAD else ["security.W021"]

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_PREFIX,
        # JSON, never pickle: anything that can write Redis (node hosts, runners, edges) must not be
        # able to run code in the console by planting a value (review H-B; core.cache).
        "OPTIONS": {"serializer": "core.cache.JsonSerializer"},
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{REDIS_PREFIX}:asgi"},
    },
}

CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": RedisKeys(REDIS_PREFIX).celery_keyprefix()}
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Long conversion jobs get their own queue so placement and clean-up never wait behind them.
CELERY_TASK_ROUTES = {"inference.tasks.job_run": {"queue": "jobs"}}
CELERY_WORKER_CONCURRENCY = WORKER_CONCURRENCY
CELERY_BEAT_SCHEDULE = {
    "node-sweep": {"task": "inference.tasks.nodes_sweep", "schedule": NODE_SWEEP_S * 1.0},
    "blobs-collect": {"task": "inference.tasks.blobs_collect", "schedule": BLOB_GC_EVERY_S * 1.0},
    "deployments-reconcile": {"task": "inference.tasks.deployments_reconcile_all", "schedule": 15.0},
    "rollouts-watch": {"task": "inference.tasks.rollouts_watch", "schedule": ROLLOUT_WATCH_S * 1.0},
    "deployments-autoscale": {
        "task": "inference.tasks.deployments_autoscale",
        "schedule": AUTOSCALE_EVERY_S * 1.0,
    },
    "jobs-reap": {"task": "inference.tasks.jobs_reap", "schedule": 10.0},
    "routes-publish": {"task": "inference.tasks.routes_publish_all", "schedule": ROUTES_REPUBLISH_S * 1.0},
    "api-keys-sync": {"task": "accounts.tasks.api_keys_sync", "schedule": 60.0},
    "api-key-usage-rollup": {"task": "accounts.tasks.api_key_usage_rollup", "schedule": USAGE_ROLLUP_S * 1.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LANTAU_LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
