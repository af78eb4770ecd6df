"""The routed chat client: OpenAI-compatible chat completions from the edge or the cloud, as the
router decides, with the cloud as fallback. Needs the `client` extra (httpx2):
`pip install 'edge-cloud-router[client]'`. Guide: docs/clients.md.
"""

from serving.chat.client import RoutedChat
from serving.chat.conversation import conversation_prompt
from serving.chat.endpoint import Endpoint
from serving.chat.errors import (
    SlowFirstToken,
    StreamInterrupted,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamMalformed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from serving.chat.routing_info import Completion, RoutingInfo
from serving.chat.streams import AsyncChatStream, ChatStream

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
