"""The shipped base model (``models/animfleet-small``): its config, its training run, and the
model cards written from measured numbers."""
