"""How a job's frames are made: the animation pipeline, the SVD one, samplers, full-resolution
rendering, and the masked and brushed paths."""
