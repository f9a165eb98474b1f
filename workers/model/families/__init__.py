"""Serving image-to-video model families through diffusers pipelines."""
