"""Which Kafka client errors are the configuration's fault and which pass with time.

kafka-python 3.0 lets some of its errors escape ``poll()``, ``send()`` and the admin calls
although it retries them itself elsewhere: the group coordinator lookup, for one, catches only
``KafkaTimeoutError`` while it waits for a metadata refresh, so ``KafkaConnectionError`` (an
``InvalidMetadataError``) comes out of ``consumer.poll()`` when connections are reset. Those
pass with time: the caller backs off and tries again. What retrying cannot fix is named here.
"""

from __future__ import annotations

from kafka import errors as Errors

from monitor.sources.exceptions import BrokerConfigError, BrokerUnavailableError

# Answers that stay the same however often the request is repeated.
CONFIG_ERRORS: tuple[type[Exception], ...] = (
    Errors.AuthorizationError,  # topic, group, cluster, transactional id, delegation token
    Errors.SaslAuthenticationFailedError,
    Errors.UnsupportedSaslMechanismError,
    Errors.IllegalSaslStateError,
    Errors.SecurityDisabledError,
    Errors.KafkaConfigurationError,
    Errors.UnsupportedVersionError,  # IncompatibleBrokerVersion too
    Errors.InvalidTopicError,
    Errors.InvalidGroupIdError,
    Errors.InvalidSessionTimeoutError,  # outside the broker's group.{min,max}.session.timeout
    Errors.InconsistentGroupProtocolError,
    Errors.GroupMaxSizeReachedError,
    Errors.InvalidPartitionsError,  # topic creation
    Errors.InvalidReplicationFactorError,
    Errors.PolicyViolationError,
)


def is_config_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or the error it was raised from) is one retrying cannot fix."""
    seen: BaseException | None = exc
    for _ in range(5):  # a listener's error comes back wrapped; the chain is short
        if seen is None:
            return False
        if isinstance(seen, CONFIG_ERRORS):
            return True
        seen = seen.__cause__
    return False


def config_error(exc: BaseException, where: str) -> BrokerConfigError | None:
    """The one-line error to stop with when ``exc`` is the configuration's fault."""
    if not is_config_error(exc):
        return None
    return BrokerConfigError(f"{where}: {describe(exc)} (check kafka settings and the "
                             f"broker's ACLs; retrying cannot fix this)")


def startup_error(exc: BaseException, where: str) -> BrokerConfigError | BrokerUnavailableError:
    """What a failure before consuming started stops with (nothing is lost by stopping)."""
    return config_error(exc, where) or BrokerUnavailableError(f"{where}: {describe(exc)}")


def describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return text if name in text else f"{name}: {text}" if text else name
