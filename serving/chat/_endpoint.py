"""The endpoint the routed chat client calls: serving.endpoints._record.Endpoint, the SDK's one endpoint
record (where it is, which model, how long to wait for it, the extra parameters it gets, and what
its tokens cost; docs/clients.md). Kept here so that `from serving.chat._endpoint import Endpoint`
keeps working; `serving.chat.Endpoint` and `serving.Endpoint` are the same class."""

from __future__ import annotations

from serving.endpoints._record import MAX_TOKEN_COUNT, Endpoint, token_counts

__all__ = ["MAX_TOKEN_COUNT", "Endpoint", "token_counts"]
