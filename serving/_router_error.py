"""RouterError, the root of every exception the SDK raises (the hierarchy, and why it has a module of
its own: serving/errors.py). Import it from `serving` or `serving.errors`.
"""


class RouterError(Exception):
    """Any error the SDK raises on purpose: `except RouterError` catches them all. Each subclass also
    keeps the standard base its callers catch (ValueError, RuntimeError, ...: serving/errors.py)."""
