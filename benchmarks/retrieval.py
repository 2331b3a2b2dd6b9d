"""Attachment retrieval: index build and query times for a 1 MB document, and recall@3.

The document is the retrieval test set (tests/data/retrieval/docs, five package READMEs)
repeated, each copy under its own "# Part N" heading, until it reaches --size-mb. Timed
steps, each the best of --runs:
- read: load_path on the file (decode, line endings, sha256);
- chunk: the AttachmentSet sizing it (one token count of the whole text, then chunking with
  the model's tokenizer, counted as `Engine` counts: the in-process backend's `tokenize`), at
  n_ctx 4096 with 512 kept for the reply, chatapp's defaults;
- index: building the BM25 index over the chunks (bm25s);
- query: one BM25 search, and one whole retrieve (search, budget, render), per question of
  tests/data/retrieval/questions.json: median and worst.
Recall@3 is measured on the test set itself (not the repeated document), as the test does.

    .venv/bin/python benchmarks/retrieval.py [--model PATH] [--size-mb 1.0] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.retrieval.attachments import AttachmentSet
from chatapp.engine.retrieval.index import ChunkIndex
from chatapp.engine.retrieval.loading import load_path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "retrieval"
N_CTX, RESERVE = 4096, 512


def big_document(size_bytes: int) -> str:
    texts = [p.read_text() for p in sorted((DATA / "docs").iterdir())]
    parts, total, n = [], 0, 0
    while total < size_bytes:
        n += 1
        part = f"# Part {n}\n\n" + "\n\n".join(texts) + "\n\n"
        parts.append(part)
        total += len(part.encode("utf-8"))
    return "".join(parts)


def best(runs: int, step):
    """The fastest of `runs` calls (damps other load on a shared machine), and the last result."""
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return min(times), result


def recall_at_3(count_tokens, questions) -> tuple[int, int]:
    attachments = AttachmentSet(count_tokens, N_CTX, RESERVE)
    attachments.attach(DATA / "docs")
    index = attachments.index()
    hits = 0
    for item in questions:
        (target,) = [c for c in index.chunks if c.file == item["file"] and item["answer"] in c.text]
        hits += target in [s.chunk for s in index.search(item["question"], limit=3)]
    return hits, len(questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the catalog default)")
    parser.add_argument("--size-mb", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.model is None:
        from chatapp.engine.models.catalog import load_catalog
        from chatapp.engine.models.resolve import resolve_model

        args.model = resolve_model(load_catalog().default)
    runtime = LlamaRuntime(args.model, LoadOptions(n_ctx=256))  # only its tokenizer is used
    backend = LocalBackend(runtime)

    def count_tokens(text: str) -> int:  # as Engine._count_tokens
        return len(backend.tokenize(text))

    questions = json.loads((DATA / "questions.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.md"
        path.write_text(big_document(int(args.size_mb * 2**20)))
        size = path.stat().st_size
        read_s, loaded = best(args.runs, lambda: load_path(path))

        def plan():
            attachments = AttachmentSet(count_tokens, N_CTX, RESERVE)
            attachments.add(loaded.attachments)
            return attachments

        chunk_s, attachments = best(args.runs, plan)
        (planned,) = attachments.plans
        chunks = [c for p in attachments.plans if not p.whole for c in p.chunks]
        index_s, index = best(args.runs, lambda: ChunkIndex(chunks))  # built anew each run (the set caches its own)
        search_s = [best(args.runs, lambda q=item["question"]: index.search(q, 10))[0] for item in questions]
        retrieve_s = [best(args.runs, lambda q=item["question"]: attachments.retrieve(q))[0] for item in questions]
    hits, total = recall_at_3(count_tokens, questions)
    runtime.close()

    print(f"document: {size / 2**20:.2f} MiB, {planned.tokens} tokens, {len(planned.chunks)} chunks "
          f"(median {statistics.median(c.tokens for c in planned.chunks):.0f} tokens)")
    print(f"read:     {read_s * 1000:8.1f} ms")
    print(f"chunk:    {chunk_s * 1000:8.1f} ms   (token count + chunking with the model's tokenizer)")
    print(f"index:    {index_s * 1000:8.1f} ms   (bm25s)")
    print(f"search:   {statistics.median(search_s) * 1000:8.2f} ms median, {max(search_s) * 1000:.2f} ms worst, "
          f"over {len(questions)} questions")
    print(f"retrieve: {statistics.median(retrieve_s) * 1000:8.2f} ms median, {max(retrieve_s) * 1000:.2f} ms worst "
          f"(search + budget + render)")
    print(f"recall@3: {hits}/{total} = {hits / total:.3f} on tests/data/retrieval")


if __name__ == "__main__":
    main()
