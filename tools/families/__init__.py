"""Offline builders for the served image-to-video families."""
