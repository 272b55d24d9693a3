"""Errors of the policy package."""

from __future__ import annotations

from monitor.exceptions import SpecwatchError

__all__ = ["HindsightFeatureError", "PolicyError", "PolicyUsageError"]


class PolicyError(SpecwatchError):
    """A policy cannot be computed."""


class PolicyUsageError(PolicyError):
    """Bad arguments: the command exits 2."""

    exit_code = 2


class HindsightFeatureError(PolicyUsageError):
    """A feature known only after the request ran was asked for."""
