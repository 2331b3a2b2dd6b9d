"""The app's side of the loaded model: what the header and the Model panel show of it, the scan of
its file's tensors, and switching to another model (Ctrl+L).

ChatApp holds one `ModelController` (`app.models_ui`). Listing the stores, loading a model and
scanning a file run in the app's thread workers and only post messages; the app's handlers pass
them back here, and this controller sets what the app shows (`model`, `model_info`, the shown
branch), never a widget. The conversation goes on with the new model: it is loaded into the new
engine on the loading worker, so the figures shown after the switch are the new engine's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine, ModelSummary
from chatapp.engine.machine.model_fit import ModelRow
from chatapp.engine.models.resolve import model_default_preset
from chatapp.errors import ChatappError
from chatapp.presets import load_presets
from chatapp.ui.host import ChatHost, SessionKeeper
from chatapp.ui.messages import ModelInfoReady, ModelSwitched, ModelSwitchFailed
from chatapp.ui.screens.model_picker import ModelPickerScreen, ModelsFound
from chatapp.ui.shown import fresh

if TYPE_CHECKING:
    from chatapp.engine.models.quant import ModelInfo

COMPARE_HINT = "Type to filter; Enter compares that quant with the loaded model on the conversation; Esc cancels."

Opener = Callable[[Settings, str], Engine]
"""Opens the model a spec names with these settings (chatapp.engine.opening.open_engine)."""


class ModelHost(ChatHost, Protocol):
    """What the model controller needs of the app beyond ChatHost."""

    model: ModelSummary | None
    """The loaded model, in the header and the panels."""
    model_info: ModelInfo | None
    """The scan of its file's tensors (the Model panel), None until done."""

    def retokenize(self) -> None:
        """Tokenize the composer's text again (another model cuts it otherwise)."""
        ...

    def compare_quant(self, spec: str | None) -> None:
        """Show what the model `spec` names costs against the loaded one (None: nothing chosen)."""
        ...


class ModelController:
    def __init__(self, app: ModelHost, opener: Opener | None, sessions: SessionKeeper) -> None:
        self.app = app
        self.opener = opener
        """Opens another model; None: the app keeps the model it was given."""
        self.sessions = sessions

    def show_loaded(self) -> None:
        """Show what the engine loaded at once; the slow GGUF scan runs in a worker."""
        summary = self.app.engine.summary
        if self.app.model is None or self.app.model.path != summary.path:
            self.app.model_info = None
        self.app.model = summary
        if summary.local_file:
            self.app.run_worker(lambda: self._scan(Path(summary.local_file)), name="model info", group="model-info",
                                thread=True, exclusive=True, exit_on_error=False)

    def _scan(self, path: Path) -> None:
        from chatapp.engine.models.quant import model_info  # gguf/numpy load off the UI thread

        try:
            self.app.post_message(ModelInfoReady(str(path), model_info(path)))
        except (OSError, ValueError) as exc:
            self.app.post_message(ModelInfoReady(str(path), None, f"cannot scan {path.name}: {exc}"))

    def info_ready(self, message: ModelInfoReady) -> None:
        if message.path != self.app.engine.summary.local_file:
            return  # a scan for a model that has since been replaced
        if message.info is None:
            self.app.notify(message.error, title="Quant", severity="warning", markup=False)
            return
        self.app.model_info = message.info

    # --- switching ---------------------------------------------------------------------------
    def ask(self, purpose: str = "switch") -> None:
        """Ctrl+L (purpose "switch"), or the palette's quantization cost ("compare"): the stores
        are listed on a worker, then the picker opens."""
        app = self.app
        if app.busy("switch model" if purpose == "switch" else "compare quants"):
            return
        if purpose == "switch" and self.opener is None:
            app.notify("this chat was opened on one model and cannot switch", severity="warning", markup=False)
            return
        if app.engine.summary.kind != "in-process":
            app.notify(f"{app.engine.summary.location} serves the model it was started with; "
                       + ("restart it with another -m to switch" if purpose == "switch" else
                          "comparing quants needs the model in this process"), severity="warning", markup=False)
            return
        app.status = "finding models…"
        app.run_worker(lambda: self._find(purpose), name="find models", group="model-list", thread=True,
                       exclusive=True, exit_on_error=False)

    def _find(self, purpose: str) -> None:
        """Every store is read and every header looked at (cached per file) off the UI thread."""
        from chatapp.engine.machine.model_fit import model_rows

        try:
            rows, notes = model_rows(self.app.settings)
        except (ChatappError, OSError) as exc:
            self.app.post_message(ModelsFound([], [], error=str(exc), purpose=purpose))
            return
        self.app.post_message(ModelsFound(rows, notes, purpose=purpose))

    def found(self, message: ModelsFound) -> None:
        app = self.app
        app.status = ""
        if message.error is not None:
            app.notify(f"cannot list models: {message.error}", severity="error", markup=False)
            return
        current = Path(app.engine.summary.path)
        rows = message.rows
        if not any(row.path and Path(row.path).resolve() == current.resolve() for row in rows):
            # Loaded from elsewhere (--model PATH, $CHATAPP_MODEL): list it too.
            rows.insert(0, ModelRow(current.name, "local", str(current), None, 0, None, None, None))
        if message.purpose == "compare":
            app.push_screen(ModelPickerScreen(rows, current, message.notes, title="Compare with another quant",
                                              hint=COMPARE_HINT), app.compare_quant)
        else:
            app.push_screen(ModelPickerScreen(rows, current, message.notes), self.chosen)

    def chosen(self, spec: str | None) -> None:
        app = self.app
        if spec is None or app.busy("switch model"):
            return
        if Path(spec).resolve() == Path(app.engine.summary.path).resolve():
            app.notify("that model is already loaded", timeout=3)
            return
        app.loading_model = True
        app.status = f"loading {Path(spec).name}…"
        app.run_worker(lambda: self._load(spec), name="load model", group="model", thread=True, exclusive=True,
                       exit_on_error=False)

    def _load(self, spec: str) -> None:
        """On a worker: open the model, and carry the conversation, its attachments and the
        generation settings over. The old engine is left alone (turns wait while a model loads)."""
        old = self.app.engine
        try:
            assert self.opener is not None, "a switch starts only with an opener"
            engine = self.opener(self.app.settings, spec)
            # Sized (and chunked) again with the new model's tokenizer and context.
            engine.set_attachments(plan.attachment for plan in old.attachments)
            engine.generation = old.generation
            engine.load_conversation(old.transcript(), old.window_start, old.leaf)
            figures = engine.branch_figures()
        except ChatappError as exc:
            self.app.post_message(ModelSwitchFailed(exc.one_line(), spec))
            return
        self.app.post_message(ModelSwitched(engine, figures, self._default_preset(spec)))

    def _default_preset(self, spec: str) -> str:
        """The preset naming this model as its default, as `--model` finds it at start ("" for
        none; a presets file that does not read is said when the palette lists presets)."""
        try:
            preset = model_default_preset(load_presets(), spec, self.app.settings)
        except (ChatappError, OSError):
            return ""
        return preset.name if preset is not None else ""

    def switched(self, message: ModelSwitched) -> None:
        app = self.app
        old, new = app.engine, message.engine
        drafting = new.set_drafting(old.drafting.mode, old.drafting.draft_max)
        if drafting.off_because and not old.drafting.off_because:
            app.notify(drafting.describe(), title="Drafting", severity="warning", timeout=8, markup=False)
        app.gate.engine = new
        self.sessions.moved_to(new)  # the session goes on with the new model, saved from the next turn
        app.run_worker(lambda: app.gate.close(old), name="close engine", group="close", thread=True,
                       exit_on_error=False)
        app.loading_model = False
        app.status = ""
        app.branch = fresh(message.figures)  # an empty cache: the next turn prefills the branch
        self.show_loaded()
        app.show_attachments()
        app.retokenize()
        app.notify(f"Loaded {new.summary.name}", timeout=3, markup=False)

    def switch_failed(self, message: ModelSwitchFailed) -> None:
        self.app.loading_model = False
        self.app.status = ""
        self.app.notify(message.error, severity="error", timeout=10, markup=False)
