"""The routing proxy: an OpenAI-compatible HTTP server in front of the edge and cloud endpoints (or
N; `python -m serving serve`), for apps that already speak the OpenAI API. Needs the `server` extra
(starlette, uvicorn, prometheus-client); importing this package loads none of them: `_config` holds
the options, `_app` the ASGI app, `_serve` the server. Guide: docs/clients.md.
"""
