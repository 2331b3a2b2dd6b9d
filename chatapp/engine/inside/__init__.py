"""Views inside the model: its anatomy from the GGUF header, embedding neighbours, and
attention weights captured from a replay of a turn."""
