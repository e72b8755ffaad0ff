"""The regions every test may take for granted: ``hk`` (Hong Kong) and ``us`` (United States), as
migration 0008 seeds them.

A transactional test (``django_db(transaction=True)``) ends with a flush that empties every table,
seeded rows included; Django then sends ``post_migrate``, on which ``tests/conftest.py`` calls
``regions_seed`` so the next test finds both again. A test that removes or adds regions needs nothing
more: a plain test's changes roll back, a transactional one's are flushed and the two seeded again.
"""

from __future__ import annotations

SEEDED = (("hk", "Hong Kong", 0), ("us", "United States", 1))


def regions_seed() -> None:
    """``hk`` and ``us`` in the regions table (kept as they are when there already)."""
    from inference.models import Region

    for name, display_name, order in SEEDED:
        Region.objects.get_or_create(
            name=name, defaults={"display_name": display_name, "failover_order": order}
        )


def on_post_migrate(sender, **kwargs) -> None:
    """After ``migrate`` and after each flush of a transactional test (once, for the inference app)."""
    if getattr(sender, "name", "") == "inference":
        regions_seed()
