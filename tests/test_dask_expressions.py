"""The race in Dask's expression cache that the Dask engine closes (training.engines.dask_expressions)."""

import weakref

import pandas as pd
import pytest


class Vanishing(weakref.WeakValueDictionary):
    """Says an expression is cached, then loses it: what another thread does when it drops the
    last reference to that expression between the check and the lookup."""

    def __contains__(self, name):
        there = super().__contains__(name)
        self.pop(name, None)
        return there


@pytest.fixture
def cached_expression():
    import dask.dataframe as dd

    base = dd.from_pandas(pd.DataFrame({"a": range(10)}), npartitions=2)
    return base, (base + 1).expr


def test_dasks_own_new_raises_key_error_when_the_cached_instance_dies_in_between(cached_expression, monkeypatch):
    """Dask's SingletonExpr.__new__ as installed. When this fails, a Dask release has closed the
    race and training.engines.dask_expressions can go."""
    from training.engines.dask_expressions import DASKS_NEW

    _, expr = cached_expression
    cls = type(expr)
    monkeypatch.setattr(cls, "_instances", Vanishing({expr._name: expr}))
    with pytest.raises(KeyError, match=expr._name):
        DASKS_NEW(cls, *expr.operands)


def test_the_engines_new_builds_the_expression_again_when_the_cached_one_died(cached_expression, monkeypatch):
    from training.engines.dask_expressions import _new

    _, expr = cached_expression
    cls = type(expr)
    cache = Vanishing()
    monkeypatch.setattr(cls, "_instances", cache)
    built = _new(cls, *expr.operands)
    assert type(built) is cls and built._name == expr._name and built.operands == expr.operands
    assert cache.get(expr._name) is built


def test_the_engines_new_still_hands_back_the_live_instance(cached_expression):
    from training.engines.dask_expressions import _new

    base, expr = cached_expression
    assert _new(type(expr), *expr.operands) is expr
    again = (base + 1).expr
    assert again is expr  # through SingletonExpr.__new__, whichever is installed


def test_starting_the_dask_engine_closes_the_race(monkeypatch):
    from dask._expr import SingletonExpr

    from training.engines import dask_partitions as de
    from training.engines.dask_expressions import DASKS_NEW, _new

    monkeypatch.setattr(SingletonExpr, "__new__", staticmethod(DASKS_NEW))
    with pytest.raises(de.EngineError, match="cannot reach the Dask scheduler"):
        with de.cluster("tcp://127.0.0.1:9", timeout_s=0.5):
            pass
    assert SingletonExpr.__new__ is _new
