"""The fixed set of schemas (schemas.json) that every reply-shape test and benchmarks/schema.py
run: objects, arrays, enums, bounded integers, nesting, anyOf; each with its question."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMAS: list[dict] = json.loads((Path(__file__).parent / "schemas.json").read_text(encoding="utf-8"))
