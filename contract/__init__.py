"""The wire contract shared by Lantau's processes (console, gateway, runner, node agent, bench).

Django-free (stdlib plus ``cryptography`` for signatures), so every process can import it: ``apikeys``
(key format, digests, bearer parsing, the signed Redis cache entry), ``signing`` (Ed25519, HKDF),
``quotas`` (monthly quotas and their refusal), ``redis_keys`` (every Redis key name, under the install's prefix),
``replicas`` (replica state words), ``listening`` (the runner's "I am up" line), ``envelope`` (the
JSON error body) and ``manifest`` / ``generation`` (what a runner loads from ``lantau.json``).
"""
