"""How a worker serves a model on its device: loading a variant, the serving profile and its
boot-time measurement, compilation (ahead of time and torch.compile), block caching."""
