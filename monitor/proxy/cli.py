"""``specwatch proxy``: an OpenAI-compatible reverse proxy in front of one engine that
publishes a telemetry v1 event per completion request (see ``docs/proxy.md``)."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Callable
from typing import Any

from monitor.proxy.config import ENGINES

__all__ = ["cmd_proxy", "register"]

log = logging.getLogger("specwatch")

_DESCRIPTION = """\
Pass every request to the engine at --upstream unchanged (streaming included) and pass its
responses back unchanged. Completion requests (POST /v1/chat/completions, /v1/completions,
llama.cpp's /completion, SGLang's /generate) are read for their speculative counters
(llama.cpp timings.draft_n/draft_n_accepted, vLLM metrics.speculative_decoding, SGLang
meta_info, TensorRT-LLM choices[].speculative_decoding; from the final chunk when
streaming); the model metadata of --metadata is added, and one telemetry v1 event per
request goes to Kafka (kafka.bootstrap_servers / kafka.topic of --config, or --bootstrap /
--topic), keyed by route. Publishing never delays or fails a request: while Kafka is down,
events are buffered up to --max-buffer and then dropped, counted and logged.

Every event also carries the request's temperature (where it sets one), itl_ms (p50/p99/max
of the gaps between streamed events that added text; streamed responses only), prompt_hash
and output_hash. prompt_hash: sha256 (hex, 32 chars) of the canonical JSON (sorted keys,
integral floats as integers) of the completion endpoint and the request body without the
keys that cannot change the output (model, stream, stream_options, user, metadata, store,
logprobs, top_logprobs, n_probs, return_logprob, rid, request_id, service_tier,
cache_prompt, id_slot): the prompt or messages, tools and every sampling parameter stay in.
output_hash: sha256 (hex, 32 chars) of the output text (chat message content, then each
tool call as NUL name NUL arguments; completions text; llama.cpp content; SGLang text), the
same for a streamed and a non-streamed answer.

--shadow-upstream URL: losslessness check. A --shadow-rate share of the greedy requests
(temperature 0) served with speculation is sent once more, unchanged, to URL (the same
target model without speculation) after the caller's response is complete, in the
background; its event (same route, target and prompt_hash, no draft or spec, tag
shadow=true) lets `output_mismatch` compare the output hashes. The choice is by prompt
hash (a sampled prompt is shadowed on every repeat). The caller's response never waits for
it; at most shadow_max_in_flight run at once, more are dropped; failures are counted
(specwatch_proxy_shadow_requests_total) and never surfaced.
"""

_EPILOG = """\
the route of a request: the --route-header header, else the longest matching
routes.paths prefix, else routes.models[the request's model], else --default-route; a
request with none publishes nothing (counted as no_route).

--metadata FILE (YAML), keyed by the request's `model` ("*" for any other):

  engine: llamacpp
  instance: pod-3
  routes: {header: X-Route, paths: {/code/: code-assistant}, default: chat}
  models:
    "*":
      target: {model: qwen2.5-coder-1.5b, revision: "sha256:cc32...", tokenizer: qwen2}
      draft:  {model: qwen2.5-coder-0.5b, revision: "sha256:1d96...", tokenizer: qwen2}
      spec:   {method: draft_model, num_speculative_tokens: 3,
               params: {spec_type: draft-simple}}
"""


def register(
    subparsers: Any,
    with_config: Callable[[argparse.ArgumentParser], None],
    config: Callable[[argparse.Namespace], Any],
) -> None:
    """Add ``proxy`` to the ``specwatch`` subcommands; ``config(args)`` loads the
    :class:`monitor.config.Config` whose ``kafka`` section says where events go."""
    p = subparsers.add_parser(
        "proxy", help="reverse proxy in front of an engine that publishes its telemetry",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--upstream", metavar="URL",
                   help="the engine's base URL, e.g. http://127.0.0.1:8080 (or `upstream:`)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="where the proxy listens (default 127.0.0.1:8090, or `listen:`)")
    p.add_argument("--route-header", metavar="NAME",
                   help="request header naming the route (default X-Route)")
    p.add_argument("--default-route", metavar="ROUTE",
                   help="route of requests no other rule names")
    p.add_argument("--engine", choices=ENGINES,
                   help="what the upstream is (default: auto, told from each response)")
    p.add_argument("--metadata", metavar="FILE",
                   help="YAML: model metadata, route rules and proxy settings (see below)")
    p.add_argument("--config", metavar="FILE",
                   help="specwatch configuration file (its kafka section)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic", help="Kafka topic (default: kafka.topic)")
    p.add_argument("--max-buffer", type=int, default=10000, metavar="N",
                   help="events buffered while Kafka is slow or down; more are dropped")
    p.add_argument("--shadow-upstream", metavar="URL",
                   help="non-speculative upstream serving the same target model: greedy "
                        "requests are also sent there in the background (or "
                        "`shadow_upstream:`)")
    p.add_argument("--shadow-rate", type=float, metavar="SHARE",
                   help="share of greedy requests shadowed, 0..1 (default 0.01, or "
                        "`shadow_rate:`)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve the proxy's own metrics on 127.0.0.1:PORT")
    p.set_defaults(func=lambda args: cmd_proxy(args, config(args)))


def cmd_proxy(args: argparse.Namespace, config: Any) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from monitor.proxy.app import ProxyApp
    from monitor.proxy.config import load_proxy_config
    from monitor.proxy.server import ProxyServer
    from monitor.publish import Publisher

    proxy_config = load_proxy_config(args.metadata, {
        "upstream": args.upstream, "listen": args.listen, "engine": args.engine,
        "routes.header": args.route_header, "routes.default": args.default_route,
        "shadow_upstream": getattr(args, "shadow_upstream", None),
        "shadow_rate": getattr(args, "shadow_rate", None),
    })
    host, port = listen_of(proxy_config.listen)
    logging.basicConfig(level=getattr(logging, config.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    # kafka-python logs every failed reconnect as an ERROR; the publisher says it once.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    kafka = config.kafka
    topic = args.topic or kafka.topic
    registry = CollectorRegistry()
    publisher = Publisher(kafka.bootstrap_servers, topic, max_buffer=args.max_buffer,
                          registry=registry, partitions=kafka.partitions,
                          create_topic=kafka.create_topics,
                          client_id=f"{kafka.client_id}-proxy")
    app = ProxyApp(proxy_config, publisher, registry=registry)
    server = ProxyServer(app, host, port)
    # Latency, not throughput: the event loop thread gets the GIL back from the Kafka thread
    # within 1 ms instead of 5, and the objects of start-up (modules, config) are left out
    # of every later garbage collection.
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.freeze()
    try:
        server.bind()
        if args.metrics_port is not None:
            start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
        print(f"specwatch proxy on {server.url} -> {proxy_config.upstream} "
              f"(engine {proxy_config.engine}); telemetry to Kafka {kafka.bootstrap_servers} "
              f"topic {topic}"
              + (f"; shadowing {proxy_config.shadow_rate:g} of greedy requests to "
                 f"{proxy_config.shadow_upstream}" if proxy_config.shadow_upstream else ""),
              file=sys.stderr, flush=True)
        server.serve()
    finally:
        publisher.close(timeout=5.0)
        print(f"specwatch proxy: {publisher.sent} event(s) sent, {publisher.dropped} dropped "
              f"{publisher.dropped_by_reason or ''}", file=sys.stderr)
    return 0


def listen_of(value: str) -> tuple[str, int]:
    from monitor.api.exceptions import ApiConfigError
    from monitor.api.server import parse_listen
    from monitor.exceptions import ConfigError

    try:
        return parse_listen(value)
    except ApiConfigError as e:
        raise ConfigError(f"proxy config error at listen: {e}") from None
