"""The learned edge fill (``models/animfleet-edge-fill``): its data and its training run."""
