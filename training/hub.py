"""Hugging Face Hub ids wherever a local folder is accepted (models, ``init_from``, teachers,
tokenizers, probe ``--model`` arguments).

``resolve_folder(ref)``:

  1. ``ref`` is an existing local folder: that folder (never a download);
  2. ``ref`` is a valid Hub repo id (``name`` or ``owner/name``): the local snapshot of the repo,
     fetched once by ``huggingface_hub.snapshot_download`` (configuration, tokenizer and
     safetensors weights only; no code files, so nothing runs from the repo) and read from the HF
     cache afterwards — offline too, when it is cached;
  3. otherwise a FileNotFoundError naming the path.

An id that is not cached on a machine that cannot reach the Hub (``HF_HUB_OFFLINE=1``, or no
connection) is a ``HubUnavailableError`` naming the id and why, never a traceback from deep inside
transformers.
"""
from __future__ import annotations

from pathlib import Path

# what a snapshot brings: configs, tokenizers, safetensors weights (no *.py: a repo's code never runs)
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]


class HubUnavailableError(ValueError):
    """A Hub id that cannot be fetched here (the message names the id and the reason)."""


def is_hub_id(ref: str) -> bool:
    """Whether ``ref`` is spelled like a Hub repo id (``name`` or ``owner/name``: letters, digits, ``-_.``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(ref)
    except HFValidationError:
        return False
    return True


def hub_folder(repo_id: str) -> Path:
    """The local snapshot folder of the Hub model ``repo_id`` (downloaded when not cached)."""
    from huggingface_hub import is_offline_mode, snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError:
        why = ("this machine is offline (HF_HUB_OFFLINE=1)" if is_offline_mode()
               else "the Hub cannot be reached from this machine")
        raise HubUnavailableError(
            f"{repo_id!r} is not a local folder, so it was read as a Hugging Face Hub id, but it is not (completely) "
            f"in the local cache and {why}: download it where the Hub is reachable "
            f"(huggingface-cli download {repo_id}) "
            f"or give a local save_pretrained folder") from None
    except (RepositoryNotFoundError, GatedRepoError) as err:
        raise HubUnavailableError(f"{repo_id!r} is not a local folder, and the Hugging Face Hub has no model of that "
                                  f"id that this machine may read ({type(err).__name__})") from None


def resolve_folder(ref: str | Path) -> Path:
    """A local folder for ``ref``: the folder itself, or the snapshot of the Hub id (module docstring)."""
    path = Path(ref)
    if path.is_dir():
        return path
    if path.exists():
        raise NotADirectoryError(f"{ref} is a file; give a folder or a Hugging Face Hub id")
    if isinstance(ref, str) and is_hub_id(ref):
        return hub_folder(ref)
    raise FileNotFoundError(f"{ref} is not a folder (and not a Hugging Face Hub id: those are 'name' or "
                            f"'owner/name')")
