"""Tests of monitor/engines: engine-side counting against real engines."""
