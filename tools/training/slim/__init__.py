"""The slimmed student (``models/animfleet-small-slim``): per-layer widths, the distillation
into the thinner copy, its evaluation and card."""
