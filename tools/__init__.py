"""Offline tools: training and distillation, the simulator, serving measurements, the demo and
benchmarks' helpers. Nothing the fleet runs imports this package."""

from pathlib import Path

EXAMPLE_IMAGE = Path(__file__).with_name("assets") / "example.png"  # the demo's and benchmarks'
