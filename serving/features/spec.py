"""The feature specification: everything needed to rebuild the features from a bundle."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from serving.contract import DEFAULT_MAX_CHARS, PRECISIONS
from serving.features.text_stats import STAT_NAMES


@dataclass(frozen=True)
class FeatureSpec:
    """How prompts become the router's feature vector. Stored in the bundle manifest."""

    tier: str
    max_tokens: int = 512          # tokens fed to the encoder
    max_chars: int = DEFAULT_MAX_CHARS
    add_special_tokens: bool = False
    encoder_row_wise: bool = False  # encode one prompt per call (see OnnxEncoder)
    fused: bool = False             # one model.onnx from token ids + scalars to probability
    embedding_dim: int = 32        # after projection
    stat_names: tuple[str, ...] = STAT_NAMES
    precisions: tuple[str, ...] = PRECISIONS

    @property
    def feature_names(self) -> list[str]:
        return (["n_tokens", *self.stat_names, *(f"precision_{p}" for p in self.precisions)]
                + [f"emb_{i}" for i in range(self.embedding_dim)])

    def to_dict(self) -> dict:
        data = asdict(self)
        data["stat_names"], data["precisions"] = list(self.stat_names), list(self.precisions)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "FeatureSpec":
        data = dict(data)
        data["stat_names"] = tuple(data.get("stat_names", STAT_NAMES))
        data["precisions"] = tuple(data.get("precisions", PRECISIONS))
        if tuple(data["stat_names"]) != STAT_NAMES:
            raise ValueError("bundle was built with different text statistics than this library computes: "
                             f"{list(data['stat_names'])} vs {list(STAT_NAMES)}")
        return cls(**data)
