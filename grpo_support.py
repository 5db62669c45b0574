"""Support for the twins (being written)."""
