"""Template filters the console's pages share: sizes in MiB (the unit of every table and plot), percentages."""

from __future__ import annotations

from django import template

from inference.reports import MIB

register = template.Library()


@register.filter
def mib(size_bytes) -> str:
    """Bytes as MiB with one decimal ("17.8 MiB"), the console's one size unit."""
    if size_bytes in (None, ""):
        return "–"
    return f"{float(size_bytes) / MIB:.1f} MiB"


@register.filter
def percent(fraction) -> str:
    """A 0..1 fraction as a whole percentage ("97%"); "–" when unknown."""
    if fraction in (None, ""):
        return "–"
    return f"{100 * float(fraction):.0f}%"


@register.filter
def plural(count, word: str) -> str:
    """ "1 request", "2 requests": the count with the word, pluralised with an "s" when not one."""
    count = count or 0
    return f"{count} {word}{'' if count == 1 else 's'}"
