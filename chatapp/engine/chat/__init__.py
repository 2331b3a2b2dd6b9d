"""The conversation owner: `Engine`, the conversation it keeps, and the prompt it renders.

It works over whichever `Backend` it is handed (chatapp.engine.opening builds one) and knows
neither backend wing.
"""

from chatapp.engine.chat.engine import Engine

__all__ = ["Engine"]
