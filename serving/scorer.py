"""Bundle -> calibrated scores with onnxruntime: features, router.onnx, calibration."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from features.extractor import FeatureExtractor, OnnxEncoder, Projection, load_tokenizer
from features.spec import FeatureSpec
from serving.bundle import read_manifest
from serving.calibration import apply_calibration


class Scorer:
    """Everything a bundle needs to turn prompts into calibrated cloud-needed probabilities."""

    def __init__(self, folder: str | Path, *, manifest: dict | None = None, threads: int = 1):
        import onnxruntime as ort

        folder = Path(folder)
        self.manifest = manifest if manifest is not None else read_manifest(folder)
        self.spec = FeatureSpec.from_dict(self.manifest["feature_spec"])
        projection = folder / "projection.npz"
        self.extractor = FeatureExtractor(
            self.spec, load_tokenizer(folder / "tokenizer.json"),
            OnnxEncoder(folder / "encoder.onnx", threads=threads, row_wise=self.spec.encoder_row_wise),
            Projection.load(projection) if projection.exists() else None)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(folder / "router.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.calibration = self.manifest["calibration"]

    def raw_probability(self, features: np.ndarray) -> np.ndarray:
        """Probability of class 1 from router.onnx (before calibration)."""
        probabilities = self.session.run(["probabilities"], {self.input_name: features})[0]
        return probabilities[:, 1]

    def calibrated(self, features: np.ndarray) -> np.ndarray:
        """Calibrated scores from a feature matrix."""
        return apply_calibration(self.calibration, self.raw_probability(features))

    def scores(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> np.ndarray:
        """Calibrated scores for a batch of prompts."""
        return self.calibrated(self.extractor.transform(prompts, precisions))
