"""Offline tools that make the shipped models: procedural data, training, evaluation.

One folder per thing trained (``base``, ``student``, ``slim``, ``addons``, ``fill``), over what
they share: ``data``, ``evaluation`` and the resumable run (``loop.TrainingRun``).
``animfleet train``, ``distill``, ``eval`` and ``slim`` run them (``commands``); the fleet never
imports this package.
"""
