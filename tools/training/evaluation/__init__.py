"""Measuring a model: frame metrics, the motion estimator, held-out evaluation (procedural
clips, photographs, brushed regions, the fill) and the masks drawn from the scenes."""
