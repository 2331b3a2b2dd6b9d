"""The model picker over every store: grouped by source, filtered as you type, a model that
will not fit marked before it is loaded. Rows come from real discovery over stores built from
the real default model."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Input, OptionList

from chatapp.config import Settings
from chatapp.engine.machine.model_fit import model_rows
from chatapp.ui.screens.model_picker import ModelPickerScreen
from tests.engine.models.stores import HF_NAME, LMSTUDIO_NAME, OLLAMA_NAME, use_stores
from tests.ui._helpers import wait_until


@pytest.fixture
def rows(tmp_path, monkeypatch, default_model_path):
    use_stores(tmp_path, default_model_path, monkeypatch)

    def make(**settings):
        found, notes = model_rows(Settings().replace(**settings))
        return found, notes

    return make


class Host(App[None]):
    def __init__(self, screen: ModelPickerScreen) -> None:
        super().__init__()
        self.picker, self.chosen = screen, []

    def on_mount(self) -> None:
        self.push_screen(self.picker, self.chosen.append)


def shown(picker: ModelPickerScreen) -> list[str]:
    found = picker.query_one(OptionList)
    return [str(found.get_option_at_index(i).prompt) for i in range(found.option_count)]


async def test_grouped_by_source_filtered_as_typed_and_chosen(rows, default_model_path):
    found, _ = rows()
    picker = ModelPickerScreen(found, default_model_path)
    host = Host(picker)
    async with host.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: picker.is_mounted)
        lines = shown(picker)
        titles = [line for line in lines if line in ("chatapp's catalog", "Hugging Face cache", "Ollama", "LM Studio")]
        assert titles == ["chatapp's catalog", "Hugging Face cache", "Ollama", "LM Studio"]
        assert any(HF_NAME in line and "Q4_1" in line and "134.5M params" in line for line in lines)
        await pilot.press(*"olla")  # typed while the list has focus: it goes to the filter
        assert picker.query_one(Input).value == "olla"
        lines = shown(picker)
        assert lines[0] == "Ollama" and any(OLLAMA_NAME in line for line in lines)
        assert not any(LMSTUDIO_NAME in line or HF_NAME in line for line in lines)
        await pilot.press("down", "down", "enter")
        await wait_until(pilot, lambda: host.chosen)
        assert Path(host.chosen[0]).read_bytes()[:4] == b"GGUF" and host.chosen[0] != str(default_model_path)


async def test_a_model_that_will_not_fit_says_so_before_loading(rows, default_model_path):
    found, _ = rows(n_ctx=1 << 30, allow_long_ctx=True)
    assert any(row.fits is False for row in found)
    picker = ModelPickerScreen(found, default_model_path)
    async with Host(picker).run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: picker.is_mounted)
        assert any(HF_NAME in line and "does not fit in memory" in line for line in shown(picker))
