"""The routed chat client: OpenAI-compatible chat completions from the edge or the cloud, as the
router decides, with the cloud as fallback. Needs the `client` extra (httpx2):
`pip install 'edge-cloud-router[client]'`. Guide: docs/clients.md.
"""

from serving.chat._client import RoutedChat
from serving.chat._conversation import conversation_prompt
from serving.chat._endpoint import Endpoint
from serving.chat._errors import (
    SlowFirstToken,
    StreamInterrupted,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamMalformed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from serving.chat._routing_info import Completion, RoutingInfo
from serving.chat._streams import AsyncChatStream, ChatStream

__all__ = [
    "AsyncChatStream",
    "ChatStream",
    "Completion",
    "Endpoint",
    "RoutedChat",
    "RoutingInfo",
    "SlowFirstToken",
    "StreamInterrupted",
    "UpstreamError",
    "UpstreamHTTPError",
    "UpstreamMalformed",
    "UpstreamTimeout",
    "UpstreamUnreachable",
    "conversation_prompt",
]
