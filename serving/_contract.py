"""The contract between training and the SDK: names and bounds both sides must agree on. Training
writes bundles with these values; the SDK, evaluation and the log loaders read them from here. This
module imports nothing of the project."""

from __future__ import annotations

# Bundle layout
SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
# The summary of its training traffic a bundle carries (serving.monitoring._drift).
DRIFT_REFERENCE_FILE = "drift_reference.json"

# What a client may declare about the answer it needs.
PRECISIONS = ("exact", "standard", "tolerant")

# Where a request runs first: the edge alone, the edge with the cloud as fallback, the cloud.
EDGE, FALLBACK, CLOUD = "edge", "edge_with_cloud_fallback", "cloud"
ZONES = (EDGE, FALLBACK, CLOUD)
# Where an endpoint runs (its `where`) -> the side a policy written for two endpoints forbids with it.
SIDE_OF = {"device": EDGE, "cloud": CLOUD}

# Characters of a prompt that are tokenized and scanned: bounds the cost of routing any
# prompt (~450 tokens of English); lengths are still counted on the whole text.
DEFAULT_MAX_CHARS = 2048
DEFAULT_EDGE_CONTEXT_TOKENS = 1024

# Sanity bounds a bundle must stay within, so an edited manifest cannot make a load cost
# gigabytes (an encoder input of 1e8 tokens allocates ~0.9 GB) or a file read unbounded.
MAX_MANIFEST_BYTES = 4 << 20
MAX_FILE_BYTES = 512 << 20
MAX_TOKENS_LIMIT = 8192
MAX_CHARS_LIMIT = 1 << 20
MAX_EMBEDDING_DIM = 4096
MAX_CALIBRATION_POINTS = 100_000


def zone_for(score: float, lo: float, hi: float) -> str:
    """edge below `lo`, cloud above `hi`, edge_with_cloud_fallback in between (inclusive)."""
    if score < lo:
        return EDGE
    if score > hi:
        return CLOUD
    return FALLBACK
