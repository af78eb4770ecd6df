"""A race in Dask's expression cache, closed for the Dask engine's process.

Dask keeps one live instance per expression name (`dask._expr.SingletonExpr._instances`, a
WeakValueDictionary) and hands it back when the same expression is built again:
`if name in cls._instances: return cls._instances[name]`. Between that check and the lookup,
another thread can drop the last reference to the instance; its entry leaves the dictionary
and the lookup raises KeyError. A LocalCluster's scheduler runs in the training's own process,
on a thread of its own, and unpickles every graph the training submits into expressions named
like the training's: while the training's thread builds and drops expressions, a graph's
deserialization can fail ("Error during deserialization of the task graph" in the scheduler's
log), and what depended on it is cancelled ("lost dependencies"). The Dask cross-validation
test failed once in a full `make test` with these two messages (the scheduler logs no cause;
this race is the one found that gives both). Two threads doing what those two do raise the
KeyError within seconds: `.venv/bin/python -m training.engines.dask_expressions` (below).

`close_the_race()` makes the check and the lookup one `get`, and leaves the rest of Dask's
`__new__` as it is. tests/test_dask_expressions.py holds Dask's own `__new__` to the race, so the
test fails, and this module can go, once a Dask release no longer has it.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time
import weakref

from dask._expr import Expr, SingletonExpr

DASKS_NEW = SingletonExpr.__new__


def _new(cls, *args, _determ_token=None, **kwargs):
    """SingletonExpr.__new__ (dask 2026.8) with the cached instance read once."""
    if not hasattr(cls, "_instances"):
        cls._instances = weakref.WeakValueDictionary()
    inst = Expr.__new__(cls, *args, _determ_token=_determ_token, **kwargs)
    name = inst._name
    if cls.__init__ == object.__init__:
        cached = cls._instances.get(name)  # None when it never was there or died meanwhile
        if cached is not None:
            return cached
    cls._instances[name] = inst
    return inst


def close_the_race() -> None:
    """Use `_new` for every SingletonExpr in this process (idempotent)."""
    SingletonExpr.__new__ = staticmethod(_new)


def race(seconds: float) -> tuple[int, int]:
    """Two threads for `seconds`, with this process's SingletonExpr.__new__: one builds and
    drops an expression, the other unpickles the same expression, as the training's thread and
    a LocalCluster's scheduler do. (expressions unpickled, KeyErrors raised in either thread)."""
    import dask.dataframe as dd
    import pandas as pd

    base = dd.from_pandas(pd.DataFrame({"a": range(10)}), npartitions=2)
    pickled = pickle.dumps((base + 1).expr)
    stop, counts, errors = threading.Event(), [0], []

    def build_and_drop() -> None:
        while not stop.is_set():
            try:
                built = (base + 1).expr
                del built  # the last reference goes: its cache entry leaves with it
            except KeyError as exc:
                errors.append(exc)

    def unpickle() -> None:
        while not stop.is_set():
            try:
                pickle.loads(pickled)
                counts[0] += 1
            except KeyError as exc:
                errors.append(exc)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows in seconds
    threads = [threading.Thread(target=build_and_drop), threading.Thread(target=unpickle)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(switch)
    return counts[0], len(errors)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    for label in ("Dask's own __new__", "the engine's __new__"):
        if label.startswith("the engine"):
            close_the_race()
        unpickled, key_errors = race(seconds)
        print(f"{label}: {unpickled:,} expressions unpickled in {seconds:g} s, {key_errors} KeyErrors")
