"""The engine scraper (``specwatch scrape``): a producer of telemetry, like the proxy, the
adapters and the publisher. It reads engines' Prometheus counters and sends one telemetry v1
event per interval to Kafka (or a JSON-lines file), where the daemon reads it as any source.

Its config types (``ScrapeConfig``, ``ScrapeTarget``) live in ``monitor/scrape_config.py``,
in the config layer: ``monitor/config.py`` reads them and imports nothing above itself.
"""
