"""Lantau's benchmark: ``make bench`` or ``python -m bench [--quick] [--scenarios raw,runner,...]``."""
