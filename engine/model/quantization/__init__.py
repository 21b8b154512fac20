"""Weight-only quantization: the model's layers quantized to int8/int4 (``quantize``), the
quantized linear layers (``linear``), and their kernels timed against the float matmul
(``timing``)."""
