"""One module per job kind; each defines one ``JobKindBase`` subclass decorated with ``@register``.

Modules here are discovered by ``inference.jobs.registry``: adding a kind is adding a module.
"""
