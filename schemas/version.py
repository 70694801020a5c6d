"""The receipt schema version, on its own so that reading a raw receipt (and migrating it) loads no models."""

SCHEMA_VERSION = 6
"""The receipt schema version this code writes. Older versions are migrated on read (:mod:`schemas.migrations`)."""
