"""Models and their inputs: factories, seeded or file inputs, ONNX export, quantization and the
content-hashed model cache."""
