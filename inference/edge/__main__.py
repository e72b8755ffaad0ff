"""Entry point: ``python -m inference.edge --region hk --port 8080`` (see ``inference.edge.config``)."""

from __future__ import annotations

import sys

from .config import parse_args
from .server import main

if __name__ == "__main__":
    sys.exit(main(parse_args()))
