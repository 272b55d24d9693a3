"""Errors shared across specwatch; each subpackage adds its own in its ``exceptions.py``."""


class SpecwatchError(Exception):
    """Base class of every error specwatch raises on purpose."""


class ConfigError(SpecwatchError):
    """The configuration file or environment is invalid; the message names the key path."""
