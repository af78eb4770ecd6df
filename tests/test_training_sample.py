"""`max_train_rows`: the boosters read a prompt-hash sample of the training rows, the same
prompts in both engines; validation and test rows are never cut, and the run says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from data.simulator import write_shards
from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, config_for
from training.config import TrainConfig


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """6,000 simulated rows as the local engine prepares them, and their config."""
    from training.engines.local import prepare_frame

    folder = tmp_path_factory.mktemp("sample_logs")
    write_shards(folder, 6_000, rows_per_shard=2_000, seed=5)
    config = config_for(tmp_path_factory.mktemp("run"), folder, tmp_path_factory.mktemp("cache"))
    return prepare_frame(config), config


def _local_sample(prepared, config, cap):
    from training.engines.local import _training_sample

    frame, report = prepared[0].frame, dict(prepared[0].report)
    return _training_sample(
        frame, config.with_options({"split": {"max_train_rows": cap}}), report, Console(quiet=True)
    ), report


def test_both_engines_sample_the_same_training_prompts_and_keep_every_held_out_row(prepared):
    import dask
    import dask.dataframe as dd

    from training.engines import dask_cluster
    from training.engines.dask_partitions import ROUTING_COLUMNS

    _, config = prepared
    frame = prepared[0].frame
    cap = 1_500
    local, report = _local_sample(prepared, config, cap)
    capped = config.with_options({"split": {"max_train_rows": cap}})
    # The Dask engine's rows: the same merged rows, in 4 partitions, prepared on each.
    with dask.config.set({"dataframe.convert-string": False}):  # as training.engines.dask_partitions.cluster
        rows = dd.from_pandas(frame[list(ROUTING_COLUMNS)].assign(n_merged=frame["n_merged"]), npartitions=4)
    on_cluster = dask_cluster._prepare(rows, capped)
    with dask.config.set(scheduler="synchronous"):
        sampled = dask_cluster._sample(on_cluster, "train", cap, {"rows": len(frame)}, capped).compute()

    train = local[local["split"] == "train"]
    assert set(train["prompt"]) == set(sampled["prompt"])
    assert abs(len(train) - cap) <= 0.1 * cap, len(train)
    assert report["training_sample"] == {
        "max_train_rows": cap,
        "rows": len(train),
        "fraction": pytest.approx(cap / (len(frame) * 0.7)),
    }
    for split in ("val", "test"):
        assert (local["split"] == split).sum() == (frame["split"] == split).sum()


def test_a_smaller_sample_lies_inside_a_larger_one_and_no_cap_keeps_every_row(prepared):
    _, config = prepared
    small, large = (set(_local_sample(prepared, config, cap)[0]["prompt"]) for cap in (800, 2_000))
    assert small < large
    whole, report = _local_sample(prepared, config, None)
    assert len(whole) == len(prepared[0].frame) and "training_sample" not in report
    bigger_than_the_logs, _ = _local_sample(prepared, config, 10**9)
    assert len(bigger_than_the_logs) == len(prepared[0].frame)


def test_max_train_rows_must_be_a_positive_integer():
    for bad in (0, -5, 2.5, "many"):
        with pytest.raises(ValueError, match="split.max_train_rows"):
            TrainConfig(split={"max_train_rows": bad})


def test_a_capped_run_trains_on_the_sample_and_records_it_in_the_bundle(
    small_routellm, encoder_cache, trained_small, tmp_path
):
    from training.engines.base import train

    full = json.loads((trained_small[1].bundle / "manifest.json").read_text())
    train_rows = round(full["data"]["rows"] * 0.7)
    result = train(
        config_for(
            tmp_path,
            small_routellm,
            encoder_cache,
            split={"max_train_rows": train_rows // 2},
            acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
        )
    )
    data = json.loads((result.bundle / "manifest.json").read_text())["data"]
    assert data["training_sample"]["max_train_rows"] == train_rows // 2
    assert abs(data["training_sample"]["rows"] - train_rows // 2) <= 0.1 * train_rows
    # Validation and test are the same rows as the uncapped run's: the figures stay comparable.
    assert result.metrics["test"]["rows"] == trained_small[1].metrics["test"]["rows"]
    assert np.isfinite(result.metrics["test"]["learned"]["apgr"])
