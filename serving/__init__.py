"""Embedded routing SDK: decides edge / edge-with-cloud-fallback / cloud per request.

Runtime dependencies: numpy, onnxruntime, tokenizers.
"""

from serving.bundle import BundleError
from serving.decision import Decision
from serving.execute import CloudCallError, Execution, Step
from serving.router import Router, Update
from serving.rules import RuleRouter
from serving.watcher import BundleWatcher, PolicyWatcher

__all__ = [
    "BundleError",
    "BundleWatcher",
    "CloudCallError",
    "Decision",
    "Execution",
    "PolicyWatcher",
    "Router",
    "RuleRouter",
    "Step",
    "Update",
]
