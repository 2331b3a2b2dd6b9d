"""Modal screens, each framed by dialog.Dialog: help, sessions, system prompt, sampling, attachments,
model picker, conversation tree, anatomy and attention."""
