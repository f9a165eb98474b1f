"""The distilled student (``models/animfleet-small-distilled``): guidance and step
distillation of the base model, and the student against its teacher."""
