"""Embedded routing SDK: decides edge / edge-with-cloud-fallback / cloud per request.

Runtime dependencies: numpy, onnxruntime, tokenizers.
"""
from serving.bundle import BundleError
from serving.decision import Decision
from serving.execute import CloudCallError, Execution, Step
from serving.router import Router
from serving.rules import RuleRouter

__all__ = ["BundleError", "CloudCallError", "Decision", "Execution", "Router", "RuleRouter", "Step"]
