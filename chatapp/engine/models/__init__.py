"""Model files: naming and finding them (resolve.py), the PyPI catalog and its pulls, the GGUF
header, quantization facts and the chat template."""
