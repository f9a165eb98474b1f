"""Motion add-ons on a worker: the LoRA and control branches beside the served U-Net, and the
store that reads and keeps them."""
