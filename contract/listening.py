"""The runner's "listening" line: printed on stdout once its socket is bound, before the model loads.

Written by ``inference.runner.__main__`` (and ``bench.plain_server``); read by the launcher
(``inference.runner.launch``) that the node agent, the benchmark and the tests share.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^LANTAU_RUNNER_LISTENING port=(\d{1,5})(?:\s|$)")


def format_listening(port: int) -> str:
    """The line to print (without newline) once listening on ``port``."""
    if not 0 < port < 65536:
        raise ValueError(f"not a TCP port: {port}")
    return f"LANTAU_RUNNER_LISTENING port={port}"


def parse_listening(line: str) -> int | None:
    """The port of a listening line, or None for any other output line."""
    match = _LINE.match(line.strip())
    if match is None:
        return None
    port = int(match.group(1))
    return port if 0 < port < 65536 else None
