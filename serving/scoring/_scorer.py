"""Bundle -> calibrated scores with onnxruntime.

Two bundle layouts, chosen at training time and named in the manifest's feature spec:
- fused (static tier): `model.onnx` takes token ids, mask and scalar features and runs embedding +
  trees in one onnxruntime call;
- staged (transformer tier): `encoder.onnx` (one prompt per call), `projection.npz`, `router.onnx`.
Both end in one output per head (the manifest's `score.outputs`): column 1 is that head's probability,
calibrated in the graph when its calibration says `in_model` (Platt, folded into the trees), else here
(serving.scoring._calibration, e.g. isotonic). The routing score is P(cloud good) - P(edge good) for
`expected_gain` bundles, P(cloud needed) for older ones.

Novelty (serving.scoring._novelty): a fused bundle whose manifest says `novelty.in_model` computes it
in the graph (one more output, `novelty.output`); older fused bundles and staged ones carry the
reference as a file, and it is computed here from the graph's features and the ids."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from serving._contract import DRIFT_REFERENCE_FILE
from serving.bundle._bundle import Bundle, BundleError
from serving.bundle._manifest import ENDPOINTS_KIND
from serving.features._extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection, onnx_session
from serving.scoring._calibration import calibrator
from serving.scoring._novelty import Novelty

if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import NDArray
    from typing_extensions import TypeAlias

    # An onnxruntime session's run: (output names, feeds by input name, run options) -> the outputs.
    RunModel: TypeAlias = Callable[[list[str], dict[str, NDArray[Any]], None], list[NDArray[Any]]]


@dataclass(slots=True, eq=False)
class Scores:
    """What a bundle's graph said of a batch: token counts, and one score per prompt with its heads (two endpoints) or
    each endpoint's expected quality (N); `note`: why scoring failed (degraded: rule table or price order decides)."""

    n_tokens: Sequence[float]
    _: KW_ONLY
    scores: Sequence[float] | None = None
    heads: Sequence[tuple[float, ...]] | None = None
    novelty: Sequence[float] | None = None
    expected: NDArray[np.float64] | None = None
    note: str | None = None


class Scorer:
    """Everything a bundle needs to turn prompts into routing scores, head probabilities and
    novelty. Built from a verified Bundle: every file comes from its checked bytes, none from disk."""

    def __init__(self, bundle: Bundle, *, threads: int = 1) -> None:
        self.manifest = bundle.manifest
        self.spec = self.manifest.feature_spec
        self.calibration = self.manifest.calibration
        tokenizer = FastTokenizer.shared(bundle.content("tokenizer.json"))
        # The training traffic's summary (serving.monitoring._drift), read when asked for (Router.drift_reference).
        self.drift_reference: bytes | None = (
            bundle.content(DRIFT_REFERENCE_FILE) if DRIFT_REFERENCE_FILE in self.manifest.files else None
        )
        # The encoder before the projection, for OutcomeLog(privacy="embedding"): a staged bundle runs
        # it anyway; a fused one carries it (encoder.onnx) if trained with bundle_encoder, loaded on first use.
        self._raw_encoder: OnnxEncoder | None = None
        if self.spec.fused:
            self.session = onnx_session(bundle.content("model.onnx"), threads=threads)
            self.extractor = FeatureExtractor(self.spec, tokenizer, encoder=None, projection=None)
            feeds = {"input_ids", "attention_mask", "scalars"}
        else:
            self.session = onnx_session(bundle.content("router.onnx"), threads=threads)
            encoder = OnnxEncoder(bundle.content("encoder.onnx"), threads=threads, row_wise=self.spec.encoder_row_wise)
            projection = Projection.from_bytes(bundle.content("projection.npz"))
            self.extractor = FeatureExtractor(self.spec, tokenizer, encoder, projection)
            self._raw_encoder = encoder
            feeds = {"features"}
        inputs = {i.name for i in self.session.get_inputs()}
        if inputs != feeds:
            raise BundleError(f"the model's inputs are {sorted(inputs)}, expected {sorted(feeds)}")
        score = self.manifest.score
        self.outputs, self.gain = list(score.outputs), score.kind == "expected_gain"
        self.endpoints = score.kind == ENDPOINTS_KIND  # one output: every endpoint's expected quality
        if self.endpoints:
            self._check_endpoint_graph()
        self.calibrators: list[Callable[[float], float]] = [
            float if self.calibration[h].get("in_model") else calibrator(self.calibration[h]) for h in score.heads
        ]
        section = self.manifest.novelty
        # novelty from the graph (`in_model`), from the reference file here, or none
        self.novelty_output = output = section.get("output") if section.get("in_model") else None
        self.novelty = None
        if output is not None:
            if output not in {o.name for o in self.session.get_outputs()}:
                raise BundleError(f"the manifest's novelty output {output!r} is not an output of the model")
            self.outputs.append(output)
        elif section:
            self.novelty = Novelty.from_bytes(
                bundle.content(section["file"]),
                embedding_threshold=section["embedding_threshold"],
                unseen_threshold=section["unseen_threshold"],
            )
            if self.spec.fused:
                self.outputs.append("features")  # the embedding, for the familiarity measure
        self._encoder_onnx = (
            bundle.content("encoder.onnx") if self.spec.fused and "encoder.onnx" in self.manifest.files else None
        )
        # InferenceSession.run re-checks the feed's names on every call (about the tree model's own cost);
        # they were checked once above, so call the compiled session (the public method if onnxruntime hides it).
        self.run_model: RunModel = getattr(self.session, "_sess", self.session).run

    def _check_endpoint_graph(self) -> None:
        """An N-endpoint bundle: its graph outputs every endpoint's calibrated probability as one
        [n, N] tensor (score.outputs), with nothing left to calibrate here."""
        score = self.manifest.score
        if not self.spec.fused:
            raise BundleError("an N-endpoint bundle is one fused model.onnx (feature_spec.fused)")
        for head in score.heads:
            calibration = self.calibration[head]
            if not calibration.get("in_model") and calibration.get("method") != "none":
                raise BundleError(
                    f"endpoint {head!r}: calibration {calibration.get('method')!r} outside the model; an "
                    "N-endpoint bundle's graph outputs calibrated probabilities"
                )
        (output,) = score.outputs
        shapes = {o.name: o.shape for o in self.session.get_outputs()}
        if output not in shapes:
            raise BundleError(f"the manifest's endpoints output {output!r} is not an output of the model")
        width = shapes[output][-1] if shapes[output] else None
        if width != len(score.heads):
            raise BundleError(
                f"the model's output {output!r} holds {width} endpoints' probabilities; the manifest lists "
                f"{len(score.heads)} ({', '.join(score.heads)})"
            )

    def pooled_embedding(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32] | None:
        """The pooled embedding of prepared ids by the bundle's encoder.onnx, before the projection; None without it."""
        if self._raw_encoder is None and self._encoder_onnx is not None:
            self._raw_encoder = OnnxEncoder(self._encoder_onnx, row_wise=self.spec.encoder_row_wise)
        return None if self._raw_encoder is None else np.asarray(self._raw_encoder(ids, mask), dtype=np.float32)

    @classmethod
    def load(cls, folder: str | Path, *, threads: int = 1) -> "Scorer":
        """Read, verify and load a bundle folder (BundleError when it cannot serve)."""
        from serving.bundle._bundle import read_bundle

        return cls(read_bundle(folder), threads=threads)

    def score(self, prompts: Sequence[str], precisions: Sequence[str | None]) -> Scores:
        """What the graph says of the prompts, in one model call: each endpoint's expected quality
        (an endpoints graph), else a score per prompt with its heads and novelty."""
        if self.endpoints:
            expected, n_tokens, novelty = self._expected(prompts, precisions, with_novelty=True)
            return Scores(n_tokens, expected=expected, novelty=novelty)
        scores, n_tokens, heads, novelty = self.score_batch(prompts, precisions)
        return Scores(n_tokens, scores=scores, heads=heads, novelty=novelty)

    def score_batch(
        self, prompts: Sequence[str], precisions: Sequence[str | None]
    ) -> tuple[list[float], list[float], list[tuple[float, ...]], list[float] | None]:
        """(scores, token counts, each prompt's head probabilities as a tuple, novelty or None), in one model call."""
        ids, mask, scalars, _, n_tokens = self.extractor.prepare(prompts, precisions)
        feeds: dict[str, NDArray[Any]]
        if self.spec.fused:
            feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
        else:
            features = self.extractor.transform(prompts, precisions, batch_size=max(len(prompts), 1))
            feeds = {"features": features}
        outputs = self.run_model(self.outputs, feeds, None)
        novelty = self._novelty_of(outputs, ids, mask, None if self.spec.fused else features)
        if not self.gain:
            calibrate = self.calibrators[0]
            scores = [calibrate(row[1]) for row in outputs[0].tolist()]
            return scores, n_tokens, [(s,) for s in scores], novelty
        (edge, cloud), (cal_edge, cal_cloud) = outputs, self.calibrators
        heads: list[tuple[float, ...]] = [
            (cal_edge(e[1]), cal_cloud(c[1])) for e, c in zip(edge.tolist(), cloud.tolist())
        ]
        # serving.bundle._manifest.routing_score, per prompt on plain floats (the hot path)
        return [c - e for e, c in heads], n_tokens, heads, novelty

    def expected(
        self, prompts: Sequence[str], precisions: Sequence[str | None]
    ) -> tuple[NDArray[np.float64], list[float]]:
        """An N-endpoint bundle's ([prompts, endpoints] calibrated P(good answer), in the manifest's
        endpoints order; token counts), in one model call."""
        expected, n_tokens, _ = self._expected(prompts, precisions, with_novelty=False)
        return expected, n_tokens

    def _expected(
        self, prompts: Sequence[str], precisions: Sequence[str | None], *, with_novelty: bool
    ) -> tuple[NDArray[np.float64], list[float], list[float] | None]:
        """expected() and, `with_novelty` and a familiarity reference, each prompt's novelty (else None)."""
        ids, mask, scalars, _, n_tokens = self.extractor.prepare(prompts, precisions)
        feeds: dict[str, NDArray[Any]] = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
        outputs = self.run_model(self.outputs if with_novelty else self.outputs[:1], feeds, None)
        novelty = self._novelty_of(outputs, ids, mask, None) if with_novelty else None
        return np.asarray(outputs[0], dtype=np.float64), n_tokens, novelty

    def _novelty_of(
        self,
        outputs: list[NDArray[Any]],
        ids: NDArray[np.int64],
        mask: NDArray[np.int64],
        features: NDArray[np.float32] | None,
    ) -> list[float] | None:
        """Each prompt's novelty, popped off the end of `outputs`: the graph's own (`in_model`), or the reference
        file's on the embedding (a fused graph's `features` output, else the staged `features`); else None."""
        if self.novelty_output is not None:
            return outputs.pop().tolist()  # type: ignore[no-any-return]
        if self.novelty is None:
            return None
        features = outputs.pop() if features is None else features
        if len(ids) == 1 and mask[0, -1]:  # route(): one prompt, unpadded (its last id is real)
            return [self.novelty.score_one(features[0, -self.spec.embedding_dim :], ids[0])]
        return self.novelty.scores(features[:, -self.spec.embedding_dim :], ids, mask).tolist()  # type: ignore[no-any-return]

    def features(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """The router's feature rows for texts (no precision declared), as the model sees them:
        the acceptance check reads them for answers (serving.scoring._acceptance)."""
        texts = list(texts)
        if not self.spec.fused:
            return self.extractor.transform(texts, [None] * len(texts), batch_size=max(len(texts), 1))
        ids, mask, scalars, _, _ = self.extractor.prepare(texts, [None] * len(texts))
        return self.run_model(["features"], {"input_ids": ids, "attention_mask": mask, "scalars": scalars}, None)[0]

    def scores(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> NDArray[np.float64]:
        """Calibrated scores for a batch of prompts."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        return np.array(self.score_batch(list(prompts), precisions)[0], dtype=np.float64)
