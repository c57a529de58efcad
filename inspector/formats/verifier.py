"""The verifier (target model) a draft's config names, found on this machine without the network.

speculators writes `speculators_config.verifier.name_or_path`: the path or Hugging Face hub id
the draft was trained against (e.g. "meta-llama/Llama-3.1-8B-Instruct"). On a GPU box that
serves the target, that model usually sits in the local hub cache, so `--target auto` gives the
trainers' metrics (which need the verifier's final norm and lm_head) without a path. It is opt-in:
without it nothing outside the given inputs is read. Looked for, in order:

1. a folder: the name as an absolute path, or relative to the checkpoint folder;
2. the hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
   else `~/.cache/huggingface/hub`, in `models--{org}--{name}/snapshots/{revision}` with the
   revision `refs/main` names (or the only snapshot there).

A candidate counts only when it holds a config.json and a weight file; nothing is downloaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError
from inspector.formats.files import read_bytes
from inspector.formats.tensorfiles import find_weight_file, read_json

NAME_KEY = "speculators_config.verifier.name_or_path"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class NamedVerifier:
    """What the draft's config names, and the local folder it was found in (None: not found)."""

    name: str
    folder: Path | None

    def note(self) -> str:
        return f"--target auto: {self.folder} (the draft's {NAME_KEY} {self.name!r})"


def verifier_name(checkpoint: Path) -> str | None:
    """The verifier's path or hub id named in the checkpoint's config.json, if any."""
    path = Path(checkpoint) / "config.json"
    if not path.is_file():
        return None
    try:
        cfg = read_json(path)
    except InputError:
        return None  # the draft's loader names a bad config; this lookup is only a convenience
    node: object = cfg
    for key in NAME_KEY.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node.strip() if isinstance(node, str) and node.strip() else None


def hub_cache_dir(env: dict[str, str] | None = None) -> Path:
    """Where huggingface_hub keeps downloaded models on this machine."""
    env = dict(os.environ) if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _usable(folder: Path) -> bool:
    try:
        if not (folder / "config.json").is_file():
            return False
        find_weight_file(folder)
    except (InputError, OSError):
        return False
    return True


def _snapshot(repo: Path) -> Path | None:
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            rev = read_bytes(ref, 4096).decode("ascii", errors="replace").strip()
            if re.fullmatch(r"[0-9a-f]{7,64}", rev) and (snapshots / rev).is_dir():
                return snapshots / rev
        found = [p for p in snapshots.iterdir() if p.is_dir()] if snapshots.is_dir() else []
    except (OSError, InputError):
        return None
    return found[0] if len(found) == 1 else None


def find_verifier(
    checkpoint: Path, name: str | None = None, *, env: dict[str, str] | None = None
) -> NamedVerifier | None:
    """The verifier the checkpoint's config names, looked up locally; None when none is named."""
    name = name if name is not None else verifier_name(checkpoint)
    if name is None:
        return None
    candidates: list[Path] = []
    given = Path(name).expanduser()
    candidates.append(
        given if given.is_absolute() else Path(os.path.normpath(Path(checkpoint) / given))
    )
    if _HUB_ID.fullmatch(name) and ".." not in name:
        repo = hub_cache_dir(env) / ("models--" + name.replace("/", "--"))
        snap = _snapshot(repo)
        if snap is not None:
            candidates.append(snap)
    for folder in candidates:
        if _usable(folder):
            return NamedVerifier(name, folder)
    return NamedVerifier(name, None)
