"""Where `bench run`'s tokenizer comes from: a folder, a preset, a Hugging Face Hub id, the server.

The tokenizer builds prompts of exact token lengths (loadgen.workloads.prompts), so it must be
the served model's. Resolution:

- ``--tokenizer SPEC``: a local folder (tokenizer.json, else config.json's vocabulary as the
  reference engine would), a preset name, or a Hub id ``org/name[@revision]``, tried in that
  order;
- no ``--tokenizer`` with ``--url``: the served model's ``root`` then ``id`` from /v1/models
  (vLLM reports in ``root`` the path or Hub id it loaded) each as a folder, then as a Hub id
  (a preset too, for the reference engine, whose ``root`` is what it loaded); where none
  resolves, the endpoint's own /tokenize and /detokenize (bench.run.endpoint.server_tokenizer).

Hub ids are resolved with huggingface_hub: its cache (``HF_HUB_CACHE``, else ``HF_HOME``/hub),
``HF_TOKEN`` (read by huggingface_hub itself, never printed or stored) and ``HF_HUB_OFFLINE``
(read at each call). Only the tokenizer's files are fetched (HUB_TOKENIZER_FILES), never
weights. Every failure is one line saying what was tried and the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from huggingface_hub import snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from bench.run.endpoint.preflight import KeyRefused, PreflightError, models_document
from bench.run.endpoint.server_tokenizer import ServerTokenizer, ServerTokenizerRefused
from engine.tokenizer.for_model import tokenizer_for_model
from engine.tokenizer.tokenizer import TokenizerError
from loadgen.protocols import TokenizerLike
from perfmodel.model_config import ConfigError, ModelConfig
from perfmodel.presets import PRESETS
from results.schema import TokenizerSection, TokenizerSourceKind

__all__ = [
    "HUB_TOKENIZER_FILES",
    "ResolvedTokenizer",
    "TokenizerNotFoundError",
    "resolve_tokenizer",
    "tokenizer_for_endpoint",
]

# What a Hub snapshot fetches: the tokenizer, its chat template and special tokens, and the
# small config.json (the model's shape for run.json's analytic section). Never weights.
HUB_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "config.json",
)
# org/name, as the Hub spells repository ids, with an optional @revision (branch, tag, commit).
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
_FIX = "pass --tokenizer with a local folder, a preset or a Hugging Face Hub id (org/name)"


class TokenizerNotFoundError(ValueError):
    """No tokenizer resolved; the one-line message says what was tried and the fix."""


@dataclass(frozen=True)
class ResolvedTokenizer:
    """A tokenizer and where it came from.

    ``name`` is what was resolved (the folder, preset, Hub id, or the served model for
    ``server``); ``revision`` the Hub commit of the snapshot; ``model_dir`` a local folder with
    the model's config.json (for run.json's analytic section), if any.
    """

    tokenizer: TokenizerLike
    source: TokenizerSourceKind
    name: str
    revision: str | None = None
    model_dir: Path | None = None

    @property
    def load_tokenizer(self) -> TokenizerLike | None:
        """The tokenizer the load may use to count tokens: None for a server's, whose calls
        would be round trips from the load's event loop (the run counts from usage instead)."""
        return None if self.source == "server" else self.tokenizer

    @property
    def shape_spec(self) -> str | None:
        """What names the model's shape for results.figures.analytic: the folder with its
        config.json,
        or the preset; None when neither is known."""
        if self.model_dir is not None:
            return str(self.model_dir)
        return self.name if self.source == "preset" else None

    def describe(self) -> str:
        """One line for the console: the source, the name, the revision."""
        at = f" @ {self.revision}" if self.revision else ""
        how = " (prompt lengths by the server's /tokenize)" if self.source == "server" else ""
        return f"{self.source} {self.name}{at}{how}"

    def to_json(self) -> TokenizerSection:
        section = TokenizerSection(
            source=self.source,
            name=self.name,
            prompt_lengths="server /tokenize" if self.source == "server" else "client tokenizer",
        )
        if self.revision is not None:
            section["revision"] = self.revision
        return section


def resolve_tokenizer(
    spec: str, presets: bool = True, option: str = "--tokenizer"
) -> ResolvedTokenizer:
    """``spec``: a folder, a preset (when ``presets``), or a Hub id, in that order; ``option``
    is the flag that gave it, for the error.

    Raises TokenizerNotFoundError naming what was tried and the fix.
    """
    resolved, tried = _try_spec(spec, presets)
    if resolved is None:
        raise TokenizerNotFoundError(f"{option} {spec!r}: {'; '.join(tried)}; {_FIX}")
    return resolved


def tokenizer_for_endpoint(
    base_url: str,
    model: str | None,
    headers: Mapping[str, str] | None = None,
    presets: bool = False,
) -> ResolvedTokenizer:
    """The tokenizer of the model ``base_url`` serves (``model``, else its first), found
    without --tokenizer (module docstring). ``presets``: also try ``root`` as a preset name
    (for the reference engine only, whose presets another engine does not know).

    Raises TokenizerNotFoundError naming every attempt and the fix.
    """
    entry = _served_model(base_url, model, headers)
    served_id = str(entry.get("id") or model or "")
    candidates = [str(c) for c in (entry.get("root"), entry.get("id")) if c]
    tried: list[str] = []
    for candidate in dict.fromkeys(candidates):
        resolved, attempts = _try_spec(candidate, presets and candidate == entry.get("root"))
        if resolved is not None:
            return resolved
        tried.extend(attempts)
    try:
        server = ServerTokenizer.probe(base_url, served_id, headers)
    except ServerTokenizerRefused as e:
        raise TokenizerNotFoundError(f"--url {base_url}: {e}") from e
    if isinstance(server, ServerTokenizer):
        return ResolvedTokenizer(server, "server", served_id)
    tried.append(f"server tokenization: {server}")
    where = f"--url {base_url} (model {served_id!r})"
    raise TokenizerNotFoundError(f"{where}: no tokenizer found: {'; '.join(tried)}; {_FIX}")


def _try_spec(spec: str, presets: bool) -> tuple[ResolvedTokenizer | None, list[str]]:
    """The first of folder, preset, Hub id that resolves ``spec``, with what each attempt said."""
    tried: list[str] = []
    path = Path(spec).expanduser()
    if path.is_dir():
        try:
            return _from_folder(path, "folder", str(path)), tried
        except _Unusable as e:
            tried.append(f"folder {spec}: {e}")
    else:
        tried.append(f"folder {spec}: no such directory")
    if presets:
        if spec in PRESETS:
            preset = tokenizer_for_model(spec, PRESETS[spec].vocab_size, is_preset=True)
            return ResolvedTokenizer(preset, "preset", spec), tried
        tried.append(f"preset: not one of {', '.join(sorted(PRESETS))}")
    match = _HUB_ID.match(spec)
    if match is None:
        tried.append("hub: not an id of the form org/name[@revision]")
        return None, tried
    try:
        return _from_hub(match["repo"], match["rev"]), tried
    except _Unusable as e:
        tried.append(f"hub {spec}: {e}")
    return None, tried


class _Unusable(Exception):
    """One attempt that did not resolve; its message is one clause of the final error."""


def _from_folder(path: Path, source: TokenizerSourceKind, name: str) -> ResolvedTokenizer:
    has_tokenizer = (path / "tokenizer.json").is_file()
    has_config = (path / "config.json").is_file()
    if not has_tokenizer and not has_config:
        raise _Unusable("no tokenizer.json (nor a config.json for a synthetic vocabulary)")
    vocab, model_dir = 0, None
    try:
        if has_config:
            vocab, model_dir = ModelConfig.from_hf_config(path).vocab_size, path
    except (ConfigError, OSError, ValueError) as e:
        # A model the reference engine does not run (a vision-language model's folder): its
        # tokenizer.json still counts the text, but it names no shape for the analytic figures.
        if not has_tokenizer:
            raise _Unusable(_first_line(e) or type(e).__name__) from e
    try:
        tokenizer = tokenizer_for_model(str(path), vocab, is_preset=False)
    except (TokenizerError, OSError, ValueError) as e:
        raise _Unusable(_first_line(e) or type(e).__name__) from e
    return ResolvedTokenizer(tokenizer, source, name, model_dir=model_dir)


def _offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but read now: it reads it once at import."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_cache_dir() -> str | None:
    """HF_HUB_CACHE, else HF_HOME/hub, read now; None leaves huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _from_hub(repo_id: str, revision: str | None) -> ResolvedTokenizer:
    offline = _offline()
    cache = _hub_cache_dir()
    try:
        folder = Path(
            snapshot_download(
                repo_id,
                revision=revision,
                allow_patterns=list(HUB_TOKENIZER_FILES),
                cache_dir=cache,
                local_files_only=offline,
            )
        )
    except GatedRepoError as e:
        raise _Unusable("gated; accept its terms on the Hub, then set HF_TOKEN") from e
    except RepositoryNotFoundError as e:
        status = e.response.status_code if e.response is not None else "404"
        raise _Unusable(
            f"not found on the Hub (HTTP {status}); check the id, or set HF_TOKEN for a private one"
        ) from e
    except RevisionNotFoundError as e:
        raise _Unusable(f"revision {revision!r} not found on the Hub") from e
    except LocalEntryNotFoundError as e:
        where = f"the Hugging Face cache ({cache or 'its default folder'})"
        if offline:
            raise _Unusable(
                f"not in {where} and HF_HUB_OFFLINE is set; fetch it once online "
                f"(`hf download {repo_id} --include 'tokenizer*' config.json`) or unset "
                "HF_HUB_OFFLINE"
            ) from e
        raise _Unusable(f"the Hub could not be reached and it is not in {where}") from e
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        hint = "; set HF_TOKEN" if status in (401, 403) else ""
        raise _Unusable(f"the Hub answered HTTP {status}{hint}") from e
    except (HFValidationError, OSError, httpx.HTTPError) as e:
        raise _Unusable(f"{type(e).__name__}: {_first_line(e)}") from e
    except Exception as e:  # its HTTP client's own errors (a proxy refused, ...) vary by version
        raise _Unusable(f"{type(e).__name__}: {_first_line(e)}") from e
    if not (folder / "tokenizer.json").is_file():
        raise _Unusable("the repository has no tokenizer.json (a fast tokenizer is required)")
    resolved = _from_folder(folder, "hub", repo_id)
    # A snapshot folder is named after its commit.
    return ResolvedTokenizer(
        resolved.tokenizer, "hub", repo_id, revision=folder.name, model_dir=resolved.model_dir
    )


def _first_line(error: BaseException) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""


def _served_model(
    base_url: str, model: str | None, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    """The /v1/models entry of ``model`` (or the first); raises TokenizerNotFoundError."""
    # The pre-flight check's reading of /v1/models, so that a server wanting a key, or one that
    # is no LLM server, is said as such here too.
    try:
        document = models_document(base_url, headers or {})
    except KeyRefused as e:
        # A key to fix, not a tokenizer: --tokenizer would only move the same 401 to the load.
        raise TokenizerNotFoundError(str(e)) from e
    except PreflightError as e:
        raise TokenizerNotFoundError(
            f"{e}; the served model's tokenizer cannot be found from it, so {_FIX}"
        ) from e
    data = document.get("data") if isinstance(document, dict) else None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    if not entries:
        raise TokenizerNotFoundError(
            f"--url {base_url}: GET /v1/models lists no model, so the served model's tokenizer "
            f"cannot be found; {_FIX}"
        )
    if model is not None:
        for entry in entries:
            if entry.get("id") == model:
                return entry
        return {"id": model}
    return entries[0]
