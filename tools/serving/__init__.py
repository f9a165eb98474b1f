"""Offline serving tools: measure configurations, tune a serving profile, build AOT artifacts."""
