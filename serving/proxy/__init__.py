"""The routing proxy: an OpenAI-compatible HTTP server in front of an edge and a cloud endpoint
(`python -m serving serve`), for apps that already speak the OpenAI API. Needs the `server`
extra (starlette, uvicorn, prometheus-client); importing this package loads none of them:
`config` holds the options, `app` the ASGI app, `serve` the server. Guide: docs/clients.md.
"""
