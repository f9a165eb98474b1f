"""What is done to a job's pixels outside the networks: mask geometry, motion-brush fields,
the fill of unknown pixels, greyscale, and the per-image template cache."""
