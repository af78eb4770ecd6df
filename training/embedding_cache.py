"""On-disk cache of raw embeddings for encoders that are slow to run (the transformer tier;
the static tier recomputes its embedding faster than it could read one back): one SQLite table
keyed by 16 bytes of the SHA-256 of the encoder's identity and the text, the vector as float32
bytes, at most `max_rows` vectors (500,000, ~0.8 GB at 384 wide), the oldest deleted first.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np

DEFAULT_MAX_ROWS = 500_000
_BATCH = 500  # SQLite caps bound parameters per statement


class EmbeddingCache:
    """get/put float32 vectors by (encoder key, text), keeping the newest `max_rows`."""

    def __init__(self, path: Path, encoder_key: str, *, max_rows: int = DEFAULT_MAX_ROWS):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.encoder_key, self.max_rows = path, encoder_key, max_rows
        self.db = sqlite3.connect(str(path))
        self.db.execute("DROP TABLE IF EXISTS embeddings")  # the earlier layout (hex keys, encoder per row)
        # `age` (the rowid) orders rows by when they were written, for eviction.
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (age INTEGER PRIMARY KEY, key BLOB UNIQUE NOT NULL, "
            "vector BLOB NOT NULL)"
        )
        self.db.commit()
        self.hits = self.misses = 0

    def key(self, text: str) -> bytes:
        digest = hashlib.sha256(self.encoder_key.encode())
        digest.update(b"\0")
        digest.update(text.encode("utf-8", "surrogatepass"))
        return digest.digest()[:16]

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]

    def get_many(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        keys = [self.key(t) for t in texts]
        found: dict[bytes, bytes] = {}
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            marks = ",".join("?" * len(chunk))
            found.update(self.db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk))
        out = [np.frombuffer(found[k], dtype=np.float32) if k in found else None for k in keys]
        hit = sum(v is not None for v in out)
        self.hits, self.misses = self.hits + hit, self.misses + len(out) - hit
        return out

    def put_many(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [(self.key(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)]
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", rows)
            self._evict()

    def _evict(self) -> None:
        """Delete the oldest vectors beyond `max_rows`."""
        extra = len(self) - self.max_rows
        if extra > 0:
            self.db.execute("DELETE FROM vectors WHERE age IN (SELECT age FROM vectors ORDER BY age LIMIT ?)", (extra,))

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
            fresh = self.encoder(
                input_ids[missing, :width], attention_mask[missing, :width], [texts[i] for i in missing]
            )
            self.cache.put_many([texts[i] for i in missing], fresh)
            for i, vector in zip(missing, fresh):
                cached[i] = vector
        return np.stack(cached).astype(np.float32)
