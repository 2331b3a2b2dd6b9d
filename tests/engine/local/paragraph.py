"""A paragraph to copy with one word changed: a prompt whose reply drafts well."""

from __future__ import annotations


PARAGRAPH = ("The old lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper "
             "climbed the spiral stairs, trimmed the wick and polished the great glass lens until it shone. "
             "Ships passing in the night saw its red beam sweep across the water and knew they were close to home.")
