"""Outcome logs: the canonical schema (data.schema), readers and loaders (data.readers, data.logs,
data.routellm), preparation (data.prepare: merge, hash split, fingerprint) and the simulator."""
