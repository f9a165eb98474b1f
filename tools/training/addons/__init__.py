"""Motion add-ons (``models/addons/``): LoRAs on the student's U-Net and the motion-path
control branch; their runs, evaluations and cards."""
