"""Model discovery over large stores built from the default model (hard links): finding
(folder entries and manifests only), then listing (headers read once per file version and
cached), cold and warm.

    .venv/bin/python benchmarks/discovery.py [--models 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.models.resolve import resolve_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stores are built as the tests build them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    args = parser.parse_args()
    model = resolve_model()
    with tempfile.TemporaryDirectory() as tmp:
        from tests.engine.models.stores import build, hf_repo, ollama_model

        root = Path(tmp)
        stores = build(root, model)
        os.environ.update(stores.env())
        os.environ["XDG_CACHE_HOME"] = str(root / "cache")
        third = args.models // 3
        for i in range(third):
            hf_repo(stores.hub, model, repo_id=f"org/repo{i}", files=(f"m{i}-Q4_K_M.gguf",))
            ollama_model(stores.ollama, model, ("registry.ollama.ai", "library", f"m{i}", "latest"))
        for i in range(args.models - 2 * third):
            path = stores.lmstudio / "models" / "pub" / f"repo{i}" / f"m{i}-Q8_0.gguf"
            path.parent.mkdir(parents=True)
            os.link(model, path)
        from chatapp.engine.machine.model_fit import model_rows
        from chatapp.engine.models.discovery import discover

        start = time.perf_counter()
        found = discover()
        found_s = time.perf_counter() - start
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            rows, _ = model_rows(Settings())
            timings.append(time.perf_counter() - start)
        print(f"{len(found.models)} models: found in {found_s:.2f} s; listed with header figures in "
              f"{timings[0]:.2f} s cold, {timings[1]:.2f} s warm ({sum(r.n_params is not None for r in rows)} with "
              "parameter counts)")


if __name__ == "__main__":
    main()
