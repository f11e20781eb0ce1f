"""Coupling rules, one small module per op family; importing this package registers them all."""

from deployopt.coupling.rules import axis, concat, conv, elementwise, linear, norm, pool, quantize, shape  # noqa: F401
