"""llama.cpp in this process: the binding (llama.py, the only llama_cpp importer), the
`LocalBackend` over it, its drafting loop, and the machine-dependent choices it measures
(decode threads, exact verify batches)."""
