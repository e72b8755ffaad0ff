"""What a region's name looks like, shared by the console (``inference.models.Region``) and the agent
(``--region``), which checks the form locally; which regions exist is the console's table alone."""

from __future__ import annotations

import re

REGION_NAME_MAX = 32
REGION_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9-]{0,31}\Z")  # \Z: no trailing newline
REGION_NAME_RULE = "lowercase letters, digits and dashes, starting with a letter or digit (max 32)"


def region_name_ok(name: object) -> bool:
    return isinstance(name, str) and REGION_NAME_RE.match(name) is not None
