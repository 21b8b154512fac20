"""Readers of the quantized checkpoints people serve (compressed-tensors, GPTQ, AWQ) into the
engine's int8/int4 layers: one module per format, over the unpacked form they share."""
