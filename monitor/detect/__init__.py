"""Detection: per-segment change points, break-even, throughput and metadata rules.

Every detector here is a small class fed in event-time order with ``update(...)``, exposing
its result as properties, and able to ``snapshot()`` itself as versioned JSON and
``restore()`` from it, so a restart continues exactly where the last checkpoint left off.
"""
