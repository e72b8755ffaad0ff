"""Settings for the test suite: the real settings with a throwaway secret (tests never use production keys)."""

import os

os.environ.setdefault("SECRET_KEY", "lantau-test-suite-" + os.urandom(8).hex())

from console.settings import *  # noqa: E402,F403
