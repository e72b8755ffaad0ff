from django.core.management.base import BaseCommand

from inference.agent.main import main


class Command(BaseCommand):
    help = "Run the node agent (same as `python -m inference.agent`)."

    def add_arguments(self, parser):
        parser.add_argument("args", nargs="*")

    def run_from_argv(self, argv):
        # Hand every option to the agent's own parser; it does not need Django.
        raise SystemExit(main(argv[2:]))
