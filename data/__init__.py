"""Outcome logs: the canonical schema, loaders for canonical and RouteLLM files, preparation."""
from data.logs import DataQualityError, LoadedLogs, load_logs
from data.prepare import assign_splits, fingerprint, merge_duplicates, prompt_hash
from data.schema import COLUMNS, PRECISIONS, Reject

__all__ = ["COLUMNS", "PRECISIONS", "DataQualityError", "LoadedLogs", "Reject", "assign_splits",
           "fingerprint", "load_logs", "merge_duplicates", "prompt_hash"]
