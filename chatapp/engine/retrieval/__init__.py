"""Attachments and retrieval: files brought into a conversation, chunked and searched per turn.

- `loading`: read a file or a folder (text, Markdown, code, PDF) into `Attachment`s, all or nothing.
- `document`: `Attachment`, an attachment's text and sha256, and its record for saved sessions.
- `pdf`: a PDF's text through pypdf, read in a child process (`pdf_child`) that is bounded in
  inflated bytes, text and time, and killed when the attach is stopped.
- `cancel`: stopping an attach part-way (Esc, Ctrl+Q), all or nothing.
- `chunking`: cut a large attachment into 200-400 token chunks at headings and paragraphs.
- `index`: a BM25 index over chunks (bm25s).
- `context`: what one turn placed in the prompt (`RetrievedContext`), rendered with its sources.
- `attachments`: `AttachmentSet`, the one object the engine holds: whole or chunked, and what to
  place before each question.

Nothing is imported here, so that `chatapp.engine.events` can use `context` without loading
bm25s or pypdf.
"""
