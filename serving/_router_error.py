"""RouterError, the root of every exception the SDK raises (the hierarchy: serving/errors.py).

A module of its own that imports nothing, so each module that defines an exception derives it
from RouterError without importing any other, and serving.errors can name them all (for type
checkers) without an import cycle. Import it from `serving` or `serving.errors`.
"""

from __future__ import annotations

__all__ = ["RouterError"]


class RouterError(Exception):
    """Any error the SDK raises on purpose: `except RouterError` catches them all. Each subclass also
    keeps the standard base its callers catch (ValueError, RuntimeError, ...: serving/errors.py)."""
