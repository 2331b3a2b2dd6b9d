"""A llama.cpp llama-server over HTTP: the `ServerBackend`, its HTTP client, the model summary
it can give, and the server's vocabulary read through /tokenize."""
