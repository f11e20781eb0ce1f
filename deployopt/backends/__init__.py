"""Measurement backends. Add one: a file here with a `Backend` subclass, and a line in REGISTRY."""

from deployopt.backends.base import REGISTRY, Backend, MeasureOptions, Session, get_backend, list_backends

__all__ = ["REGISTRY", "Backend", "MeasureOptions", "Session", "get_backend", "list_backends"]
