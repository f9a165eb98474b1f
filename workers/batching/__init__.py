"""Step-level continuous batching: a worker mode that denoises up to N jobs in one loop."""

from workers.batching.engine import BatchEngine

__all__ = ["BatchEngine"]
