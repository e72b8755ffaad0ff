import sys

from inference.agent.main import main

sys.exit(main())
