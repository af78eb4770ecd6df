"""Test doubles for code that talks to OpenAI-compatible servers: the routed chat client, the proxy, or an
app built on them. Everything runs on 127.0.0.1 in the test's own process; nothing reaches a network. For
tests, load tests and examples only: the router, the chat client and the proxy never import it. Needs the
`server` extra (uvicorn): `pip install 'edge-cloud-router[server]'`. Guide: docs/clients.md, "Testing your app".

    from serving.testing import StubUpstream

    with StubUpstream("edge") as edge, StubUpstream("cloud") as cloud:
        edge.behaviour.status = 503              # change the knobs at any time
        ... RoutedChat(router, edge=Endpoint(edge.url, "small"), cloud=Endpoint(cloud.url, "big")) ...

- `StubUpstream`: a chat-completions server whose `Behaviour` knobs make it slow, failing or
  malformed, recording what it `received`; `python -m serving.testing` runs one in the foreground.
- `LocalServer`: any ASGI app (the proxy's `build_app(...)`, an app's own) served on 127.0.0.1.
- `dead_url()`: an endpoint where nothing listens (connections refused).
"""

from serving.testing._local_server import LocalServer, dead_url
from serving.testing._stub_upstream import Behaviour, Received, StubUpstream

__all__ = ["Behaviour", "LocalServer", "Received", "StubUpstream", "dead_url"]
