"""Offline tools that make the shipped model: procedural data, training, evaluation.

``animfleet train`` and ``animfleet eval`` run them; the fleet never imports this package.
"""
