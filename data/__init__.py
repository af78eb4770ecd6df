"""Outcome logs: the canonical schema (data.schema), readers and loaders (data.readers, data.logs,
data.routellm, data.hf_datasets), preparation (data.prepare: merge, hash split, fingerprint) and the simulator."""
