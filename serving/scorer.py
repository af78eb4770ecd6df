"""Bundle -> calibrated scores with onnxruntime.

Two bundle layouts, chosen at training time and named in the manifest's feature spec:
- fused (static tier): `model.onnx` takes token ids, mask and scalar features and runs
  embedding + trees in one onnxruntime call;
- staged (transformer tier): `encoder.onnx` (one prompt per call), `projection.npz`,
  `router.onnx`.
Both end in the model's `probabilities`; column 1 is the calibrated score when the manifest's
calibration says `in_model` (Platt, folded into the trees), and is calibrated here otherwise
(serving.calibration, e.g. isotonic).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from features.extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from features.spec import FeatureSpec
from serving.bundle import BundleError, read_manifest
from serving.calibration import calibrator


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class Scorer:
    """Everything a bundle needs to turn prompts into calibrated cloud-needed probabilities."""

    def __init__(self, folder: str | Path, *, manifest: dict | None = None, threads: int = 1):
        folder = Path(folder)
        self.manifest = manifest if manifest is not None else read_manifest(folder)
        self.spec = FeatureSpec.from_dict(self.manifest["feature_spec"])
        self.calibration = self.manifest["calibration"]
        tokenizer = FastTokenizer(folder / "tokenizer.json")
        if self.spec.fused:
            self.session = _session(folder / "model.onnx", threads)
            self.extractor = FeatureExtractor(self.spec, tokenizer, encoder=None, projection=None)
            feeds = {"input_ids", "attention_mask", "scalars"}
        else:
            self.session = _session(folder / "router.onnx", threads)
            encoder = OnnxEncoder(folder / "encoder.onnx", threads=threads, row_wise=self.spec.encoder_row_wise)
            self.extractor = FeatureExtractor(self.spec, tokenizer, encoder, Projection.load(folder / "projection.npz"))
            feeds = {"features"}
        inputs = {i.name for i in self.session.get_inputs()}
        if inputs != feeds:
            raise BundleError(f"the model's inputs are {sorted(inputs)}, expected {sorted(feeds)}")
        # Platt calibration is folded into the trees (training.export); others are applied here.
        self.calibrate = float if self.calibration.get("in_model") else calibrator(self.calibration)
        # InferenceSession.run re-checks the feed's names on every call, which costs about as
        # much as the tree model itself; they were checked once above, so call the compiled
        # session directly (the public method if a future onnxruntime hides it).
        self.run_model = getattr(self.session, "_sess", self.session).run

    def score_batch(self, prompts: Sequence[str], precisions: Sequence[str | None]):
        """(calibrated scores, estimated token counts) as lists of floats, in one model call."""
        if self.spec.fused:
            ids, mask, scalars, _, n_tokens = self.extractor.prepare(prompts, precisions)
            feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
        else:
            features = self.extractor.transform(prompts, precisions, batch_size=max(len(prompts), 1))
            feeds = {"features": features}
            n_tokens = features[:, 0].tolist()
        calibrate = self.calibrate
        return [calibrate(row[1]) for row in self.run_model(["probabilities"], feeds, None)[0].tolist()], n_tokens

    def scores(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> np.ndarray:
        """Calibrated scores for a batch of prompts."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        return np.array(self.score_batch(list(prompts), precisions)[0], dtype=np.float64)
