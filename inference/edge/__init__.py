"""The regional edge: the data plane's entry point (Django-free, asyncio).

One implementation, two hosts: ``python -m inference.edge --region hk`` serves it on its own (aiohttp
on uvloop, routes and keys from Redis), and the console's ``/v1/`` (``inference.gateway``) mounts the
same dispatcher with a database-backed route source for small installs. See docs/architecture.md.
"""
