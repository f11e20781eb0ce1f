"""deployopt: fit CNN channel counts to how the GPU really executes them."""

__version__ = "0.1.0"
