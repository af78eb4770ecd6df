"""Bundle -> calibrated scores with onnxruntime.

Two bundle layouts, chosen at training time and named in the manifest's feature spec:
- fused (static tier): `model.onnx` takes token ids, mask and scalar features and runs
  embedding + trees in one onnxruntime call;
- staged (transformer tier): `encoder.onnx` (one prompt per call), `projection.npz`,
  `router.onnx`.
Calibration is the graph's last step when it is Platt scaling on the fused layout; otherwise
it is applied here, from the manifest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from features.extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from features.spec import FeatureSpec
from serving.bundle import read_manifest
from serving.calibration import apply_calibration


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
        else:
            self.session = _session(folder / "router.onnx", threads)
            encoder = OnnxEncoder(folder / "encoder.onnx", threads=threads, row_wise=self.spec.encoder_row_wise)
            self.extractor = FeatureExtractor(self.spec, tokenizer, encoder, Projection.load(folder / "projection.npz"))
        self.calibrated_in_graph = "score" in {o.name for o in self.session.get_outputs()}

    def score_batch(self, prompts: Sequence[str], precisions: Sequence[str | None]):
        """(calibrated scores, estimated token counts) for a batch, in one model call."""
        if not self.spec.fused:
            features = self.extractor.transform(prompts, precisions, batch_size=max(len(prompts), 1))
            feeds = {"features": features}
            n_tokens = features[:, 0]
        else:
            ids, mask, scalars, _ = self.extractor.prepare(prompts, precisions)
            feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
            n_tokens = scalars[:, 0]
        if self.calibrated_in_graph:  # the graph ends in the calibrated score
            return self.session.run(["score"], feeds)[0], n_tokens
        probability = self.session.run(["probabilities"], feeds)[0][:, 1]
        return apply_calibration(self.calibration, probability), n_tokens

    def scores(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> np.ndarray:
        """Calibrated scores for a batch of prompts."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        return self.score_batch(list(prompts), precisions)[0]
