"""The policy layer's building blocks that run before the model. So far: content detectors
(`detectors.py`: personal data, national ids, credentials), local and linear in the prompt's length."""

from serving.policy.detectors import DETECTORS, Detector, Finding, any_detected, detect

__all__ = ["DETECTORS", "Detector", "Finding", "any_detected", "detect"]
