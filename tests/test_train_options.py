"""Training options in groups (training.config, training.options): each group's declared
constraints reject a bad value naming its dotted key, the cross-option rules theirs, unknown keys
fail naming the group's keys, and the flat keys of before the groups still load, each with a
warning naming its new key. No training here: the options alone."""

from __future__ import annotations

import json
import re
import warnings

import pytest

from tests.conftest import ROOT
from training.config import RENAMED, TrainConfig, parse_overrides
from training.options import Check, Needs, constraints_of, dotted, flat, value_at

CONSTRAINTS = constraints_of(TrainConfig)


def flat_form(config: TrainConfig) -> dict:
    """The options as the flat keys of before the groups named them (an old train_config.json)."""
    old = {new: key for key, new in RENAMED.items()}
    return {old.get(key, key): value for key, value in flat(config.to_dict()).items() if key != "endpoints.lgbm"}


def test_every_option_has_a_declared_constraint_and_every_old_key_a_new_one():
    assert set(CONSTRAINTS) == set(dotted(TrainConfig()))
    assert set(RENAMED.values()) <= set(CONSTRAINTS)


@pytest.mark.parametrize("key, rule", CONSTRAINTS.items(), ids=list(CONSTRAINTS))
def test_each_declared_constraint_rejects_a_bad_value_naming_the_dotted_key(key, rule):
    with pytest.raises(ValueError) as raised:
        TrainConfig.of({key: rule.bad})
    assert str(raised.value) == f"config {key}={rule.bad!r}: {rule.must}"
    assert all(rule.test(good) for good in rule.good)


@pytest.mark.parametrize(
    "rule", TrainConfig.rules, ids=[f"{r.key}-{getattr(r, 'other', 'check')}" for r in TrainConfig.rules]
)
def test_each_cross_option_rule_rejects_its_example_naming_the_key(rule):
    options = rule.example(CONSTRAINTS)
    with pytest.raises(ValueError) as raised:
        TrainConfig.of(options)
    said = str(raised.value)
    assert said.startswith(f"config {rule.key}={options[rule.key]!r}: ")
    if isinstance(rule, Needs):
        assert f"needs {rule.other}=" in said and f"not {options[rule.other]!r}: {rule.why}" in said
    else:
        assert isinstance(rule, Check) and said.endswith(rule.must)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lexical.sample_rows": 0}, "config lexical.sample_rows=0: must be empty or an integer >= 1"),
        ({"split": {"cv_folds": 2}}, "config split.cv_folds=2: must be 0 (a single split) or an integer in [3, 20]"),
        ({"split.val_share": 0}, "config split.val_share=0: must be a number in (0, 1)"),
        ({"split.val_share": 0.9}, "config split.val_share=0.9: needs split.val_share + split.test_share < 1"),
        ({"features.tier": "large"}, "config features.tier='large': must be one of static, transformer"),
        ({"features.max_tokens": 4}, "config features.max_tokens=4: must be empty or an integer >= 8"),
        ({"routing.cloud_budget": 1.5}, "config routing.cloud_budget=1.5: must be a number in [0, 1]"),
        ({"boosting.lgbm": "num_leaves=63"}, "config boosting.lgbm='num_leaves=63': must be a mapping of LightGBM"),
        ({"bundle.encoder": "yes"}, "config bundle.encoder='yes': must be true or false"),
        ({"data": "logs/"}, "config data='logs/': must be a list of paths"),
        (
            {"engine.name": "dask", "split.cv_folds": 5},
            "config engine.name='dask': needs split.cv_folds=0, not 5: cross-fitting needs the local engine",
        ),
        (
            {"model": {"head_sharing": "shared", "objective": "cloud_needed"}},
            "config model.head_sharing='shared': needs model.objective=expected_gain, not 'cloud_needed'",
        ),
    ],
)
def test_bad_values_are_errors_naming_the_dotted_key(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig.of(options)


@pytest.mark.parametrize("old, new", RENAMED.items(), ids=list(RENAMED))
def test_each_flat_key_of_before_loads_with_a_warning_naming_its_new_key(old, new):
    value = value_at(TrainConfig(), new)
    with pytest.warns(FutureWarning, match=re.escape(f"option {old!r} is now {new!r}")):
        config = TrainConfig.of({old: value})
    assert value_at(config, new) == value


def test_nested_dotted_and_flat_forms_give_one_configuration(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text("lexical: {sample_rows: 1000, mode: none}\nsplit:\n  cv_folds: 0\n", encoding="utf-8")
    dotted_keys = tmp_path / "dotted.json"
    dotted_keys.write_text(json.dumps({"lexical.sample_rows": 1000, "lexical.mode": "none", "split.cv_folds": 0}))
    old = tmp_path / "old.yaml"
    old.write_text("lexical_sample_rows: 1000\nlexical: none\ncv_folds: 0\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new forms warn of nothing
        config = TrainConfig.from_file(nested)
        assert TrainConfig.from_file(dotted_keys) == config
        assert TrainConfig.of(
            parse_overrides(["lexical.sample_rows=1000", "lexical.mode=none", "split.cv_folds=0"])
        ) == (config)
    with pytest.warns(FutureWarning) as caught:
        assert TrainConfig.from_file(old) == config
    said = " ".join(str(w.message) for w in caught)
    assert all(
        f"{a!r} is now {b!r}" in said for a, b in RENAMED.items() if a in ("lexical_sample_rows", "lexical", "cv_folds")
    )
    assert (config.lexical.sample_rows, config.lexical.mode, config.split.cv_folds) == (1000, "none", 0)


def test_lightgbm_overrides_nest_into_the_dict_options_old_and_new(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("boosting: {lgbm: {learning_rate: 0.05}}\n", encoding="utf-8")
    with pytest.warns(FutureWarning, match="'acceptance_lgbm' is now 'acceptance.lgbm'"):
        config = TrainConfig.from_file(
            path, parse_overrides(["boosting.lgbm.num_leaves=63", "acceptance_lgbm.num_leaves=7"])
        )
    assert config.boosting.lgbm == {"learning_rate": 0.05, "num_leaves": 63}
    assert config.acceptance.lgbm == {"num_leaves": 7}
    with pytest.warns(FutureWarning, match="'lgbm' is now 'boosting.lgbm'"):
        assert TrainConfig.of(parse_overrides(["lgbm.num_leaves=63"])).boosting.lgbm == {"num_leaves": 63}


def test_an_unknown_key_names_it_and_the_known_keys_of_its_group(tmp_path):
    with pytest.raises(
        ValueError,
        match=re.escape(
            "unknown option lexical.sample_row; the options of lexical: blend, c, folds, mode, sample_rows, start, weighting"
        ),
    ):
        TrainConfig.of({"lexical": {"sample_row": 10}})
    with pytest.raises(ValueError, match=re.escape("unknown option lexical.mode.x")):
        TrainConfig.of(parse_overrides(["lexical.mode.x=1"]))
    path = tmp_path / "c.yaml"
    path.write_text("colour: red\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(path))}: unknown option colour; known: .*cache_dir.*lexical\.\*"
    ):
        TrainConfig.from_file(path)
    with pytest.raises(ValueError, match="split is a group of options"):
        TrainConfig.of({"split": 5})


def test_the_saved_configuration_is_nested_and_both_forms_read_back(tmp_path):
    """train_config.json (MLflow) and run.json's options: nested now; the flat form of before the
    groups still reads as the same configuration, and as the same provenance options."""
    from training.provenance import options

    config = TrainConfig(split={"cv_folds": 0}, lexical={"sample_rows": 400}, boosting={"lgbm": {"num_leaves": 7}})
    saved = config.to_dict()
    assert saved["lexical"]["sample_rows"] == 400 and saved["boosting"]["lgbm"] == {"num_leaves": 7}
    (tmp_path / "new.json").write_text(json.dumps(saved))
    (tmp_path / "old.json").write_text(json.dumps(flat_form(config)))
    assert TrainConfig.from_file(tmp_path / "new.json") == config
    with pytest.warns(FutureWarning):
        assert TrainConfig.from_file(tmp_path / "old.json") == config
    assert options(flat_form(config)) == options(config) and "path" not in options(config)["bundle"]
    assert flat(saved)["lexical.sample_rows"] == 400  # MLflow's parameters, by dotted key


def test_the_derived_defaults_are_those_of_before(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = TrainConfig()
    assert (config.lexical.mode, config.lexical.weighting, config.lexical.c, config.split.cv_folds) == (
        "blend",
        "tfidf",
        1.0,
        5,
    )
    assert config.mlflow.artifact_root == "mlruns/artifacts"
    features = TrainConfig.of({"lexical.mode": "features", "engine.name": "local"})
    assert (features.lexical.weighting, features.lexical.c) == ("mean", 64.0)
    dask = TrainConfig(engine={"name": "dask"})
    assert (dask.split.cv_folds, dask.lexical.mode) == (0, "blend")
    assert TrainConfig(mlflow={"tracking_uri": "http://mlflow:5000"}).mlflow.artifact_root == "mlruns/artifacts"


def test_with_options_leaves_the_original_alone():
    base = TrainConfig(boosting={"lgbm": {"num_leaves": 7}})
    changed = base.with_options({"boosting": {"lgbm": {"learning_rate": 0.1}}, "split.cv_folds": 0})
    assert changed.boosting.lgbm == {"num_leaves": 7, "learning_rate": 0.1} and changed.split.cv_folds == 0
    assert base.boosting.lgbm == {"num_leaves": 7} and base.split.cv_folds == 5


def test_from_manifest_reads_the_bundles_settings_then_the_overrides():
    from types import SimpleNamespace

    manifest = SimpleNamespace(
        feature_spec=SimpleNamespace(tier="static", embedding_dim=16, max_tokens=None, max_chars=1000, lexical="none"),
        score=SimpleNamespace(kind="expected_gain"),
        calibration={"edge": {"method": "isotonic"}},
        target={"kind": "budget", "cloud_budget": 0.2},
        split={"val_share": 0.2, "test_share": 0.1, "salt": "x", "offset": 0.4, "cv_folds": 5},
        label={"margin_binary": 0.0, "margin_graded": 0.2},
        limits=SimpleNamespace(edge_context_tokens=512),
        novelty={"policy": "learned", "target_share": 0.05},
    )
    config = TrainConfig.from_manifest(manifest, {"routing": {"min_rows_per_tag": 50}})
    assert (config.features.embedding_dim, config.features.max_chars, config.model.calibration) == (
        16,
        1000,
        "isotonic",
    )
    assert (config.routing.target, config.routing.cloud_budget, config.routing.min_rows_per_tag) == ("budget", 0.2, 50)
    assert (config.split.salt, config.split.offset, config.split.cv_folds, config.label.margin_graded) == (
        "x",
        0.4,
        0,
        0.2,
    )
    assert (config.routing.edge_context_tokens, config.novelty.unfamiliar_policy, config.novelty.share) == (
        512,
        "learned",
        0.05,
    )
    assert config.lexical.mode == "none"


def test_the_options_table_shows_every_key():
    """docs/training.md's options table names every option by its dotted key."""
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    table = text.split("## Options", 1)[1].split("## Outputs", 1)[0]
    shown = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)?)`", table))
    assert (
        set(CONSTRAINTS) - {"lexical.blend", "lexical.weighting", "lexical.c", "lexical.folds", "lexical.start"}
        <= shown
    )
    assert {"lexical.blend", "lexical.weighting", "lexical.c", "lexical.folds", "lexical.start"} <= shown


def test_make_endpoints_takes_the_training_options(tmp_path):
    """`make endpoints --set`: the N-endpoint models read a TrainConfig; a bad option stops the
    command before any work, naming the dotted key."""
    from pipelines.endpoints import main
    from tests.conftest import invoke_command

    done = invoke_command(main, ["--out", tmp_path, "--set", "endpoints.lgbm=7"])
    assert done.exit_code == 2 and "endpoints.lgbm=7" in " ".join(done.output.split())
    assert not (tmp_path / "metrics.json").exists()
    assert TrainConfig().endpoints.lgbm == {"num_threads": 1}


def test_every_engine_the_config_accepts_has_its_module():
    from training.config import ENGINES
    from training.engines import ENGINES as MODULES

    assert list(MODULES) == list(ENGINES)
