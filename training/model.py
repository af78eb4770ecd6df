"""LightGBM router: fit with early stopping on validation, then calibrate its probability."""
from __future__ import annotations

import numpy as np

from serving.calibration import apply_calibration, logit

DEFAULT_LGBM = {
    "objective": "binary",
    "learning_rate": 0.03,
    "num_leaves": 31,
    "min_child_samples": 40,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "num_threads": 2,
}
CALIBRATIONS = ("sigmoid", "isotonic", "none")


def fit_booster(x_train, y_train, x_val, y_val, *, params: dict, num_boost_round: int = 2000,
                early_stopping_rounds: int = 100, seed: int = 0, feature_names=None):
    """Train until validation log-loss stops improving; returns the booster at its best round."""
    import lightgbm as lgb

    params = {**DEFAULT_LGBM, **params, "seed": seed, "deterministic": True, "metric": "binary_logloss"}
    train = lgb.Dataset(x_train, label=y_train, feature_name=feature_names or "auto", free_raw_data=False)
    val = lgb.Dataset(x_val, label=y_val, reference=train, free_raw_data=False)
    booster = lgb.train(params, train, num_boost_round=num_boost_round, valid_sets=[val], valid_names=["val"],
                        callbacks=[lgb.early_stopping(early_stopping_rounds, verbose=False)])
    # Keep only the trees up to the best round, so the ONNX export and predict() agree.
    return lgb.train(params, train, num_boost_round=booster.best_iteration or num_boost_round)


def fit_calibration(raw_probability, labels, *, method: str = "sigmoid") -> dict:
    """Parameters for serving.calibration.apply_calibration, fitted on validation rows."""
    if method not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {method!r}; choose one of {', '.join(CALIBRATIONS)}")
    labels = np.asarray(labels)
    if method == "none":
        return {"method": "none"}
    if labels.min() == labels.max():
        # One class only: nothing to calibrate against; keep the model's own probability.
        return {"method": "none", "note": "validation labels have one class"}
    if method == "sigmoid":
        from sklearn.linear_model import LogisticRegression

        lr = LogisticRegression(C=1e6, max_iter=1000)
        lr.fit(logit(raw_probability)[:, None], labels)
        return {"method": "sigmoid", "a": float(lr.coef_[0, 0]), "b": float(lr.intercept_[0])}
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(raw_probability, labels)
    return {"method": "isotonic", "x": iso.X_thresholds_.tolist(), "y": iso.y_thresholds_.tolist()}


def predict_score(booster, x, calibration: dict) -> np.ndarray:
    """The training pipeline's calibrated score (the SDK must reproduce it)."""
    return apply_calibration(calibration, booster.predict(x))
