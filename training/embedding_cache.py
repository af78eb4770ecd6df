"""On-disk cache of raw embeddings, keyed by encoder and text hash (SQLite, one table).

A second `make train` on the same logs reads every embedding from here instead of
running the encoder again. The key includes the encoder's identity (weights hash, tier,
token limit), so a different model never reads stale vectors.
"""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np


class EmbeddingCache:
    """get/put float32 vectors by (encoder key, text)."""

    def __init__(self, path: Path, encoder_key: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.encoder_key = path, encoder_key
        self.db = sqlite3.connect(str(path))
        self.db.execute("CREATE TABLE IF NOT EXISTS embeddings (encoder TEXT, text_hash TEXT, "
                        "vector BLOB, PRIMARY KEY (encoder, text_hash))")
        self.hits = self.misses = 0

    @staticmethod
    def text_hash(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get_many(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        hashes = [self.text_hash(t) for t in texts]
        found: dict[str, bytes] = {}
        for start in range(0, len(hashes), 500):  # SQLite caps bound parameters
            chunk = hashes[start: start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(self.db.execute(
                f"SELECT text_hash, vector FROM embeddings WHERE encoder = ? AND text_hash IN ({marks})",
                [self.encoder_key, *chunk]))
        out = [np.frombuffer(found[h], dtype=np.float32) if h in found else None for h in hashes]
        hit = sum(v is not None for v in out)
        self.hits, self.misses = self.hits + hit, self.misses + len(out) - hit
        return out

    def put_many(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [(self.encoder_key, self.text_hash(t), np.asarray(v, dtype=np.float32).tobytes())
                for t, v in zip(texts, vectors)]
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)", rows)

    def close(self) -> None:
        self.db.close()


class CachedEncoder:
    """Wraps an encoder: rows whose text is cached skip the encoder; the rest are stored."""

    def __init__(self, encoder, cache: EmbeddingCache):
        self.encoder, self.cache = encoder, cache

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        cached = self.cache.get_many(texts)
        missing = [i for i, v in enumerate(cached) if v is None]
        if missing:
            width = int(attention_mask[missing].sum(axis=1).max()) or 1
            fresh = self.encoder(input_ids[missing, :width], attention_mask[missing, :width],
                                 [texts[i] for i in missing])
            self.cache.put_many([texts[i] for i in missing], fresh)
            for i, vector in zip(missing, fresh):
                cached[i] = vector
        return np.stack(cached).astype(np.float32)
