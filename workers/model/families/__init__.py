"""Adapters that serve diffusers' image-to-video pipelines (one module per family) behind the
worker's model call; :mod:`workers.model.families.registry` picks one by pipeline class."""
