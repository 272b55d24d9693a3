"""``specwatch proxy``: a reverse proxy in front of an engine that turns each completion
response into a telemetry v1 event (see ``docs/proxy.md``).

- ``config``: the upstream, model metadata and route rules (frozen, from YAML);
- ``counters``: speculative counters and token counts of a response, per engine;
- ``stream``: reading a body for them while it is passed on, streamed or not;
- ``upstream``: the HTTP/1.1 client for the engine, with a keep-alive pool;
- ``hashes``: prompt and output hashes and the request's temperature (telemetry v1.1);
- ``event``: the telemetry event of a proxied request;
- ``shadow``: greedy requests sent again to a non-speculative upstream (losslessness);
- ``app``: the ASGI application; ``server``: uvicorn running it; ``cli``: the command.

Nothing is imported here: ``specwatch`` builds its parser from ``monitor.proxy.cli`` for every
command, which should not pay for the proxy's imports.
"""
