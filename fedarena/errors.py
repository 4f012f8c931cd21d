"""The error every bad input raises: one line saying what is wrong and what is allowed."""


class ConfigError(ValueError):
    """Invalid experiment settings, reported before any expensive work starts."""
