"""The trained modules: the motion U-Net, the pixel codec, the edge fill, the context-dedup
attention processor and the prompt tokenizer."""
