"""Training engines: where the logs are read, featurized and fitted. Each returns the same
`Fitted`, and everything after it (thresholds, figures, bundle, parity, MLflow) is shared
(training.engines.base.finish).

ENGINES maps a name to the module that implements it; modules are imported on use, so
choosing `local` never imports Dask.
"""
from __future__ import annotations

import importlib

ENGINES = {
    "local": "training.engines.local",          # every row in memory on this machine
    "dask": "training.engines.dask_cluster",    # logs as partitions on a Dask cluster
}


def get_engine(name: str):
    """The engine module of `name`: it provides fit(config, console, timings) -> Fitted and
    evaluation_frame(config, console, *, splits, max_rows) -> (frame, data report, answer rows)."""
    try:
        return importlib.import_module(ENGINES[name])
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None
