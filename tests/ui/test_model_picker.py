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
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: host.chosen)
        assert host.chosen == [OLLAMA_NAME]  # a store's model is opened by its name, the one shown


def highlighted_id(picker: ModelPickerScreen) -> str | None:
    option = picker.query_one(OptionList).highlighted_option
    return None if option is None else option.id


async def test_enter_in_the_filter_opens_the_first_match_and_titles_are_no_stops(rows, default_model_path):
    """As fzf, LM Studio and VS Code's palette: the first match is highlighted as the filter
    changes, Enter there opens it, and up and down move over models only."""
    found, _ = rows()
    picker = ModelPickerScreen(found, default_model_path)
    host = Host(picker)
    async with host.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: picker.is_mounted)
        listed = picker.query_one(OptionList)
        first = highlighted_id(picker)
        assert first is not None and not first.startswith("title:")  # a model, not "chatapp's catalog"
        seen = [first]
        for key in ["down"] * (listed.option_count + 2) + ["up"] * (listed.option_count + 2):
            await pilot.press(key)
            seen.append(highlighted_id(picker))
        assert not any(option_id is None or option_id.startswith("title:") for option_id in seen), seen
        await pilot.press(*"lmstudio")
        await wait_until(pilot, lambda: highlighted_id(picker) not in (None, first))
        await pilot.press("enter")  # still in the filter: the first match opens
        await wait_until(pilot, lambda: host.chosen)
        assert host.chosen == [LMSTUDIO_NAME]


async def test_the_loaded_model_chosen_again_is_its_path(rows, default_model_path):
    """The app says "already loaded" for it, by its path, instead of loading it again."""
    found, _ = rows()
    ollama = next(row for row in found if row.name == OLLAMA_NAME)
    picker = ModelPickerScreen(found, Path(ollama.path))
    host = Host(picker)
    async with host.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: picker.is_mounted)
        await pilot.press(*"ollama", "enter")
        await wait_until(pilot, lambda: host.chosen)
        assert host.chosen == [ollama.path]


async def test_a_model_that_will_not_fit_says_so_before_loading(rows, default_model_path):
    found, _ = rows(n_ctx=1 << 30, allow_long_ctx=True)
    assert any(row.fits is False for row in found)
    picker = ModelPickerScreen(found, default_model_path)
    async with Host(picker).run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: picker.is_mounted)
        assert any(HF_NAME in line and "does not fit in memory" in line for line in shown(picker))
