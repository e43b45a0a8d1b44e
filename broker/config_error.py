"""The error every configuration check raises (docs/operations.md "Broker configuration"): a
bad key or value, with a message that names the key. Its own module so that
:mod:`broker.config` and :mod:`broker.listener_config` share it without an import circle."""


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key."""
