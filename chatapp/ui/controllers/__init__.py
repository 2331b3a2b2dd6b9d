"""The App's controllers: each carries out one family of actions on workers, through the narrow
host (chatapp.ui.host), and changes what is shown, never a widget."""
