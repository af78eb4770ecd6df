"""The learned acceptance check: P(the edge answer is good), from the prompt and the answer
(docs/sdk.md, docs/training.md). Trained by `make train` when the logs carry edge answers
(training.acceptance), shipped as `acceptance.onnx` with a manifest entry, and used by
`router.execute(..., accept="learned")` or `router.acceptor.check(prompt, answer)`. It reads
answer_matrix's rows, each answer cut to the manifest's `max_response_chars` (its end kept), so a
check costs about one route() call whatever the edge returned; the calibrated probability is
accepted at the threshold training chose."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from serving.features._response_features import response_features
from serving.scoring._calibration import calibrator

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray
    from onnxruntime import InferenceSession  # no types of its own: Any to the checker

    from serving.bundle._bundle import Bundle
    from serving.bundle._manifest import AcceptanceSection
    from serving.scoring._scorer import RunModel, Scorer

    # texts -> the router's feature rows for them (Scorer.features)
    AnswerFeatures = Callable[[list[str]], ArrayLike]


def answer_matrix(
    prompts: Sequence[str],
    answers: Sequence[str],
    logprob_means: Sequence[float | None] | None = None,
    logprob_mins: Sequence[float | None] | None = None,
    *,
    answer_features: AnswerFeatures,
    max_chars: int,
) -> NDArray[np.float32]:
    """The acceptance model's input rows (float32), for training and the SDK alike: serving.features._response_features
    of each answer cut to its last `max_chars` characters, then the router's feature rows of it (`answer_features`)."""
    n = len(answers)
    means: list[float | None] = [None] * n if logprob_means is None else list(logprob_means)
    mins: list[float | None] = [None] * n if logprob_mins is None else list(logprob_mins)
    cut = [a[-max_chars:] for a in answers]
    own = np.stack(
        [
            response_features(p, a, logprob_mean=m, logprob_min=lo, max_chars=max_chars)
            for p, a, m, lo in zip(prompts, cut, means, mins)
        ]
    )
    return np.concatenate([own, np.asarray(answer_features(cut), dtype=np.float32)], axis=1).astype(np.float32)


@dataclass(frozen=True)
class Verdict:
    """One checked answer: the calibrated P(good), the threshold, and the outcome."""

    probability: float
    threshold: float
    accepted: bool

    def __bool__(self) -> bool:
        return self.accepted


class Acceptor:
    """A bundle's acceptance check. Build it with `Acceptor.from_bundle`; None when the bundle has none."""

    def __init__(self, session: InferenceSession, section: AcceptanceSection, answer_features: AnswerFeatures) -> None:
        self._run: RunModel = getattr(session, "_sess", session).run  # see serving.scoring._scorer: names checked once
        self._answer_features = answer_features
        self.threshold = float(section["threshold"])
        self.max_response_chars = int(section["max_response_chars"])
        self.n_features = int(section["n_features"])
        calibration = section["calibration"]
        self._calibrate: Callable[[float], float] = float if calibration.get("in_model") else calibrator(calibration)

    @classmethod
    def from_bundle(cls, bundle: Bundle, scorer: Scorer) -> "Acceptor | None":
        """The check a verified bundle ships (BundleError-free: the caller wraps load failures)."""
        from serving.features._extractor import onnx_session

        section = bundle.manifest.acceptance
        file = section.get("file")
        if not section or file is None:
            return None
        session = onnx_session(bundle.content(file))
        inputs = [(i.name, i.shape[-1]) for i in session.get_inputs()]
        if inputs != [("features", section["n_features"])]:
            raise ValueError(f"acceptance model inputs are {inputs}, expected [('features', {section['n_features']})]")
        return cls(session, section, scorer.features)

    def features(
        self,
        prompts: list[str],
        answers: list[str],
        logprob_means: Sequence[float | None] | None = None,
        logprob_mins: Sequence[float | None] | None = None,
    ) -> NDArray[np.float32]:
        """The model's input rows (float32) for answers to prompts."""
        x = answer_matrix(
            prompts,
            answers,
            logprob_means,
            logprob_mins,
            answer_features=self._answer_features,
            max_chars=self.max_response_chars,
        )
        if x.shape[1] != self.n_features:
            raise ValueError(f"acceptance features have {x.shape[1]} columns, the model takes {self.n_features}")
        return x

    def probabilities(
        self,
        prompts: list[str],
        answers: list[str],
        logprob_means: Sequence[float | None] | None = None,
        logprob_mins: Sequence[float | None] | None = None,
    ) -> NDArray[np.float64]:
        """Calibrated P(good) per answer, in one model call."""
        if not answers:
            return np.zeros(0)
        features = self.features(prompts, answers, logprob_means, logprob_mins)
        (out,) = self._run(["probabilities"], {"features": features}, None)
        return np.array([self._calibrate(p) for p in out[:, 1].tolist()])

    def check(
        self, prompt: str, answer: str, *, logprob_mean: float | None = None, logprob_min: float | None = None
    ) -> Verdict:
        """The verdict on one answer. Raises TypeError for an answer that is not text."""
        if not isinstance(answer, str) or not isinstance(prompt, str):
            raise TypeError(
                f"the acceptance check reads text; got prompt {type(prompt).__name__}, answer {type(answer).__name__}"
            )
        p = float(self.probabilities([prompt], [answer], [logprob_mean], [logprob_min])[0])
        return Verdict(p, self.threshold, p >= self.threshold)
