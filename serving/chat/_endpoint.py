"""The endpoint the routed chat client calls: the SDK's one endpoint record, serving.endpoints._record's
(docs/clients.md), importable from here too; `serving.chat.Endpoint` and `serving.Endpoint` are the same class."""

from serving.endpoints._record import MAX_TOKEN_COUNT, Endpoint, token_counts

__all__ = ["MAX_TOKEN_COUNT", "Endpoint", "token_counts"]
