"""Who may call the inference routes: the gateway (shared runner token) or a client's own API key.

* ``X-Lantau-Runner-Token`` equal to the runner's token: the gateway, which already checked the key;
  it names the key in ``X-Lantau-Key-Id`` so usage is still counted per key, and its monthly limits in
  ``X-Lantau-Key-Quota`` (``contract.quotas``) so this runner reserves room for the request (``usage``).
* ``Authorization: Bearer <api key>`` when the runner has Redis (``--redis-url``): the key is
  verified from the console's signed cache entry (``keys``), must belong to this deployment's team,
  hold the ``inference`` scope and list this deployment (if it lists any), and is rate limited when its
  entry carries ``rate_per_s``. Its monthly quota is applied when the request is admitted (``usage.admit``:
  429 ``quota_exceeded``).
  Every bad key (malformed, unknown, wrong, revoked, expired, forged entry) gets the same 401 body.
* A runner started with neither a token nor Redis is open (local development and tests).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from contract.apikeys import INVALID_KEY_MESSAGE, MISSING_KEY_MESSAGE, KeyIdentity, bearer_token
from contract.node_protocol import KEY_ID_HEADER
from contract.node_protocol import RUNNER_TOKEN_HEADER as TOKEN_HEADER
from contract.quotas import QUOTA_HEADER, Quota, quota_from_header

from .errors import BadRequest, Forbidden, RateLimited, Unauthorized
from .keys import KeyCache
from .ratelimit import RateLimiter
from .usage import UsageRecorder

INFERENCE_SCOPE = "inference"


@dataclass(frozen=True, slots=True)
class Caller:
    key_id: str | None  # None: the gateway did not name a key
    via_gateway: bool
    quota: Quota = Quota()  # the key's monthly limits, reserved against on admission (usage.admit)


class Access:
    def __init__(
        self,
        *,
        token: str | None,
        team_id: int | None,
        keys: KeyCache | None = None,
        limiter: RateLimiter | None = None,
        deployment: str = "",
        usage: UsageRecorder | None = None,
    ) -> None:
        self._token = token.encode("utf-8") if token else None
        self.team_id = team_id
        self.keys = keys
        self.limiter = limiter
        self.deployment = deployment
        self.usage = usage

    @property
    def open(self) -> bool:
        return self._token is None and self.keys is None

    async def check(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller, None for an open runner; raise 401/403/429 errors otherwise."""
        sent = headers.get(TOKEN_HEADER)
        if sent is not None and self._token is not None:
            if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), self._token):
                raise Unauthorized(f"wrong {TOKEN_HEADER} header")
            quota = quota_from_header(headers.get(QUOTA_HEADER))
            if quota is None:
                raise BadRequest(f'malformed {QUOTA_HEADER} header: expected JSON such as {{"requests": 10}}')
            return Caller(headers.get(KEY_ID_HEADER) or None, via_gateway=True, quota=quota)
        key = bearer_token(headers.get("Authorization"))
        if key is not None and self.keys is not None:
            return await self._check_key(key)
        if self.open:
            return None
        if self.keys is None:
            raise Unauthorized(f"missing or wrong {TOKEN_HEADER} header")
        raise Unauthorized(MISSING_KEY_MESSAGE)

    async def _check_key(self, key: str) -> Caller:
        assert self.keys is not None
        identity = await self.keys.lookup(key)
        if identity is None:
            raise Unauthorized(INVALID_KEY_MESSAGE)
        if INFERENCE_SCOPE not in identity.scopes:
            raise Forbidden("this API key has no `inference` scope")
        if self.team_id is None or identity.team_id != self.team_id:
            raise Forbidden("this API key's team cannot use this deployment")
        if not identity.allows(self.deployment):
            raise Forbidden(f"this API key may not call deployment {self.deployment!r}")
        await self._check_limits(identity)
        return Caller(identity.key_id, via_gateway=False, quota=identity.quota)

    async def _check_limits(self, identity: KeyIdentity) -> None:
        if identity.rate_per_s is not None and identity.burst is not None and self.limiter is not None:
            wait = await self.limiter.acquire(identity.key_id, identity.rate_per_s, identity.burst)
            if wait > 0:
                raise RateLimited(wait)
