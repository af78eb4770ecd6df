"""The feature specification: everything needed to rebuild the features from a bundle."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from serving._contract import DEFAULT_MAX_CHARS, PRECISIONS
from serving.features._text_stats import STAT_NAMES

if TYPE_CHECKING:
    from serving._json_types import JSONObject

# Lexical evidence (training.lexical), one logistic-regression margin per outcome computed
# inside the fused model.onnx from the token ids: "features" appends the margins to the trees'
# inputs; "blend" mixes each head's calibrated probability with sigmoid(its outcome's margin).
LEXICAL_MODES = ("none", "features", "blend")
LEXICAL_NAMES = ("lexical_edge", "lexical_cloud")


@dataclass(frozen=True)
class FeatureSpec:
    """How prompts become the router's feature vector. Stored in the bundle manifest."""

    tier: str
    max_tokens: int = 512  # tokens fed to the encoder
    max_chars: int = DEFAULT_MAX_CHARS
    add_special_tokens: bool = False
    encoder_row_wise: bool = False  # encode one prompt per call (see OnnxEncoder)
    fused: bool = False  # one model.onnx from token ids + scalars to probability
    embedding_dim: int = 32  # after projection
    stat_names: tuple[str, ...] = STAT_NAMES
    precisions: tuple[str, ...] = PRECISIONS
    lexical: str = "none"  # LEXICAL_MODES; not "none" only in a fused bundle

    @property
    def feature_names(self) -> list[str]:
        """The extractor's columns (the fused graph's `features` output): scalars, then the embedding."""
        scalars = ["n_tokens", *self.stat_names, *(f"precision_{p}" for p in self.precisions)]
        return scalars + [f"emb_{i}" for i in range(self.embedding_dim)]

    @property
    def model_feature_names(self) -> list[str]:
        """The trees' columns: feature_names, then the lexical margins when the bundle has them."""
        return self.feature_names + (list(LEXICAL_NAMES) if self.lexical == "features" else [])

    @property
    def served_names(self) -> list[str]:
        """The columns training scores rows with: the trees' columns, then the lexical margins a
        blend mixes in (training.model.LexicalBlend)."""
        return self.model_feature_names + (list(LEXICAL_NAMES) if self.lexical == "blend" else [])

    def to_dict(self) -> JSONObject:
        data = asdict(self)
        data["stat_names"], data["precisions"] = list(self.stat_names), list(self.precisions)
        if self.lexical == "none":  # no `lexical` key: the form bundles without lexical evidence always had
            del data["lexical"]
        return data

    @classmethod
    def from_dict(cls, data: JSONObject) -> "FeatureSpec":
        """From a manifest's `feature_spec`, which serving.bundle._manifest.check_feature_spec has checked."""
        data = dict(data)
        data["stat_names"] = tuple(data.get("stat_names", STAT_NAMES))
        data["precisions"] = tuple(data.get("precisions", PRECISIONS))
        return cls(**data)
