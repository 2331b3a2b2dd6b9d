"""chatapp: a terminal chat for local LLMs that shows how inference works underneath."""

__version__ = "0.1.0"
