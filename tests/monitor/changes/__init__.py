"""Tests of the change report (``monitor/changes``); hand-built traffic in ``traffic.py``."""
