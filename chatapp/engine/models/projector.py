"""A vision model's projector (an mmproj GGUF): where it lies beside the model and what it says
about itself, read with the gguf package without loading it (chatapp.engine.local.llama.mtmd loads it)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from chatapp.errors import ModelError


@dataclass(frozen=True)
class ProjectorInfo:
    """What an mmproj GGUF says about itself, read without loading it."""

    path: Path
    projector_type: str
    n_embd: int | None
    """The embedding size it projects into: the text model's must match."""
    image_size: int | None
    patch_size: int | None
    vision: bool
    audio: bool

    @property
    def image_token_budget(self) -> int | None:
        """Tokens one image costs at the projector's native size (a square grid of patches)."""
        if not self.image_size or not self.patch_size:
            return None
        return (self.image_size // self.patch_size) ** 2

    @property
    def sees(self) -> str:
        """"images", "audio", "images and audio" or "nothing"."""
        return " and ".join(what for what, yes in (("images", self.vision), ("audio", self.audio)) if yes) or "nothing"

    def describe(self) -> str:
        """One line, e.g. "sees images through mmproj-x.gguf (projector mlp, 16 tokens per image)"."""
        budget = f", {self.image_token_budget} tokens per image" if self.image_token_budget else ""
        return f"sees {self.sees} through {self.path.name} (projector {self.projector_type}{budget})"

    def as_dict(self) -> dict:
        return {**asdict(self), "path": str(self.path), "image_token_budget": self.image_token_budget}


def projector_info(path: Path) -> ProjectorInfo:
    """Read an mmproj's type and sizes with the gguf package; a file that is no projector says so."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path} is not a GGUF projector file: {exc}") from None

    def value(key: str):
        field = reader.get_field(key)
        return None if field is None else field.contents()

    if value("general.architecture") != "clip":
        raise ModelError(f"{path} is not an mmproj (its architecture is {value('general.architecture')!r}, not 'clip')")
    n_embd = None
    for tensor in reader.tensors:  # the projector's last layer: its output size is the text model's embedding
        if tensor.name in ("mm.2.weight", "mm.model.fc.weight", "mm.input_projection.weight", "mm.fc.weight"):
            n_embd = int(tensor.shape[-1]) if tensor.name == "mm.input_projection.weight" else int(tensor.shape[1])
    return ProjectorInfo(
        path=Path(path),
        projector_type=str(value("clip.vision.projector_type") or value("clip.projector_type") or "unknown"),
        n_embd=n_embd or value("clip.vision.projection_dim"),
        image_size=value("clip.vision.image_size"),
        patch_size=value("clip.vision.patch_size"),
        vision=bool(value("clip.has_vision_encoder")),
        audio=bool(value("clip.has_audio_encoder")),
    )


def find_projector(model: Path) -> Path | None:
    """The mmproj beside a GGUF, as llama.cpp's `-hf` and most model repos lay them out: one
    `mmproj-*.gguf` in the same folder (with several, the one whose name shares the model's stem);
    for a model in a subfolder of a Hugging Face snapshot, also the snapshot's top, where repos
    that keep each quant in its own folder keep the projector (chatapp.engine.models.hub_pull)."""
    for folder in _folders_of(Path(model)):
        found = sorted(folder.glob("mmproj*.gguf"))
        if len(found) == 1:
            return found[0]
        if found:
            stem = re.split(r"[-.](?:I?Q\d|[FB]F?\d)", Path(model).stem, flags=re.IGNORECASE)[0].lower()  # no quant tag
            named = [path for path in found if stem in path.name.lower()]
            return named[0] if len(named) == 1 else None
    return None


def _folders_of(model: Path) -> list[Path]:
    """The model's folder, then the snapshot folder above it when it lies deeper in one
    (HUB/models--ORG--REPO/snapshots/COMMIT/SUB/.../model.gguf)."""
    folders = [model.parent]
    for above in model.parents:
        if above.parent.name == "snapshots" and above.parent.parent.name.startswith("models--"):
            if above != model.parent:
                folders.append(above)
            break
    return folders


def projector_for(given: str | None, path: Path, mmproj: str | Path | None = None) -> Path | None:
    """The projector a model opens with: `mmproj` when named; for a blob of Ollama's store, the
    projector layer of the manifest that names it; else the mmproj beside the model as the user
    `given` it (a Hugging Face snapshot links its files into blobs/, so the resolved `path` lies
    in a folder that holds no mmproj), else beside `path`; None: it reads text only."""
    if mmproj:
        return Path(mmproj)
    from chatapp.engine.models.ollama_store import projector_of_blob

    in_ollama = projector_of_blob(Path(path))
    if in_ollama is not None:
        return in_ollama
    beside_given = find_projector(Path(given)) if given and Path(given).is_file() else None
    return beside_given or find_projector(path)
