"""specwatch: is speculative decoding still paying for itself, per route?

Where things are:

- an event enters in :mod:`monitor.telemetry.parse` (bytes -> validated :class:`Event`),
  fed by :mod:`monitor.sources.kafka` (the daemon) or :mod:`monitor.sources.replay` (files);
- :mod:`monitor.pipeline` de-duplicates, applies event time and aggregates into
  :mod:`monitor.aggregate` buckets;
- :mod:`monitor.store` writes rollups, source offsets and state in one transaction;
- :mod:`monitor.app` is the daemon facade; :mod:`monitor.cli` the ``specwatch`` command;
- alerts leave through :mod:`alerts`.
"""

__version__ = "0.1.0"
