"""Training engines: where the logs are read, featurized and fitted. Each returns the same
`Fitted`, and everything after it (thresholds, figures, bundle, parity, MLflow) is shared
(training.engines.base.finish).

ENGINES maps a name to the module that implements it (the `Engine` protocol); modules are
imported on use, so choosing `local` never imports Dask.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Protocol, cast

from training.config import TrainConfig

if TYPE_CHECKING:
    from training.fitted import Fitted

ENGINES = {  # every engine TrainConfig accepts (training.config.ENGINES)
    "local": "training.engines.local",  # every row in memory on this machine
    "dask": "training.engines.dask_cluster",  # logs as partitions on a Dask cluster
}


class Engine(Protocol):
    """What an engine module provides: where the rows are read, featurized and fitted."""

    def fit(
        self, config: TrainConfig, console: Any, timings: dict, *, keep_train_rows: bool = False, **options: Any
    ) -> Fitted:
        """Read, featurize and fit the heads; `keep_train_rows`: hand back the training rows
        (cross-validation fits the reference on them). The local engine also takes `refit`
        and `prepared` (training.crossval)."""
        ...

    def evaluation_frame(self, config: TrainConfig, console: Any, *, splits: tuple[str, ...], max_rows: int) -> tuple:
        """(prepared rows of `splits`, at most `max_rows` each; data report; rows with an edge answer)."""
        ...


def passive_openmp_waits() -> None:
    """LightGBM's OpenMP threads wait passively instead of spinning, which on shared cores waited
    for threads not running (docs/performance.md#training-at-scale); the trees are the same. Set
    before an engine loads LightGBM (Dask's LocalCluster workers inherit it); a value set wins."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def get_engine(name: str) -> Engine:
    """The engine module of `name` (the Engine protocol)."""
    try:
        module = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None
    passive_openmp_waits()
    return cast(Engine, importlib.import_module(module))
