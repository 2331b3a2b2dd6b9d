"""Widgets of the chat screen: transcript, composer and the live panels."""
