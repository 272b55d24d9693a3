"""Where telemetry comes from: a Kafka consumer group (the daemon) or a file (replay)."""
