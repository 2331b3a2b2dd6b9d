"""Modal screens: help, system prompt, sampling settings, model picker."""
