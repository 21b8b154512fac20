"""The two sides of `bench ab`: what each one is, and the `bench run` options of one of its runs.

A side is the reference engine of this checkout with the scenario's settings, changed by
``--X-set NAME=VALUE`` (each checked by EngineConfig over the scenario's [engine] table), or
started from another commit's virtualenv (``--X-rev``, bench.ab.revisions; with ``--X-set`` on
top), or an engine already running (``--X-url``), or one bench starts from a command line
(``--X-launch``, as `bench run --launch`). Every kind but ``--X-url`` gets a fresh engine for
each run. The load generator is always this checkout's, so both sides get the same requests
from the same plan and are measured by the same client.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.ab.revisions import Revision, RevisionError, install_revision
from bench.run.orchestrate import RunError, RunOptions, reference_engine
from bench.scenario.engine_sets import parse_settings
from bench.scenario.scenario import Scenario
from engine_adapters.reference import serve_flags
from perfmodel.files import JSONObject

__all__ = ["AbError", "Side", "parse_sets", "run_options", "side_from_options"]


class AbError(ValueError):
    """Unusable `bench ab` input; the message names the option and the fix (exit 2)."""


@dataclass(frozen=True)
class Side:
    """One side: its name ("A" or "B") and exactly one kind of engine (module doc)."""

    name: str
    settings: JSONObject = field(default_factory=dict)
    rev: str | None = None
    url: str | None = None
    launch: str | None = None
    # Filled by prepare(): the installed commit of a rev side.
    revision: Revision | None = None

    @property
    def kind(self) -> str:
        if self.url is not None:
            return "url"
        if self.launch is not None:
            return "launch"
        return "rev" if self.rev is not None else "settings"

    def describe(self) -> str:
        """One line for reports: 'B: rev HEAD (1a2b3c4d) + step_delay_ms=5'."""
        sets = " ".join(f"{k}={v}" for k, v in self.settings.items())
        if self.kind == "url":
            what = f"url {self.url}"
        elif self.kind == "launch":
            what = f"launch {self.launch}"
        elif self.kind == "rev":
            commit = self.revision.commit[:10] if self.revision else "?"
            what = f"rev {self.rev} ({commit})" + (f" + {sets}" if sets else "")
        else:
            what = f"this checkout + {sets}" if sets else "this checkout"
        return f"{self.name}: {what}"

    def to_dict(self) -> JSONObject:
        return {
            "name": self.name,
            "kind": self.kind,
            "settings": self.settings,
            "rev": self.rev,
            "commit": self.revision.commit if self.revision else None,
            "url": self.url,
            "launch": self.launch,
            "description": self.describe(),
        }


def parse_sets(values: Sequence[str], option: str) -> JSONObject:
    """``NAME=VALUE`` strings into engine settings (bench.scenario.engine_sets.parse_settings);
    raises AbError naming the option and the value."""
    try:
        return parse_settings(values, option)
    except ValueError as exc:
        raise AbError(str(exc)) from None


def side_from_options(
    name: str,
    sets: Sequence[str],
    rev: str | None,
    url: str | None,
    launch: str | None,
    scenario: Scenario,
) -> Side:
    """Check one side's options (module doc) and return it; raises AbError."""
    prefix = f"--{name.lower()}-"
    given = [o for o, v in (("rev", rev), ("url", url), ("launch", launch)) if v is not None]
    if len(given) > 1:
        raise AbError(
            f"side {name}: {' and '.join(prefix + o for o in given)} exclude each other;"
            " give one kind of engine per side"
        )
    settings = parse_sets(sets, prefix + "set")
    if settings and (url is not None or launch is not None):
        raise AbError(
            f"{prefix}set sets the reference engine's settings; the engine of"
            f" {prefix}{given[0]} takes its settings where it starts (its URL or command line)"
        )
    if url is not None and not url.startswith(("http://", "https://")):
        raise AbError(f"{prefix}url {url!r}: expected http://HOST:PORT")
    try:
        reference_engine(scenario, settings)
    except RunError as exc:
        raise AbError(f"{prefix}set: {exc}") from None
    return Side(name, settings, rev, url, launch)


def prepare(side: Side) -> Side:
    """Install a rev side's commit (cached); other sides are returned as they are."""
    if side.rev is None:
        return side
    try:
        revision = install_revision(side.rev, f"--{side.name.lower()}-rev")
    except RevisionError as exc:
        raise AbError(str(exc)) from None
    return replace(side, revision=revision)


def run_options(side: Side, base: RunOptions, runs_dir: Path) -> RunOptions:
    """The `bench run` options of one run of ``side`` (``base`` holds the shared ones)."""
    opts = replace(base, runs_dir=runs_dir, engine_overrides={})
    if side.kind == "url":
        return replace(opts, url=side.url)
    if side.kind == "launch":
        return replace(opts, launch=side.launch)
    if side.kind == "settings":
        return replace(opts, url=None, engine="reference", engine_overrides=side.settings)
    assert side.revision is not None, "prepare() installs a rev side first"
    settings = reference_engine(base.scenario, side.settings).settings()
    command = [str(side.revision.python), "-I", "-m", "bench", "serve"]
    command += ["--host", "{host}", "--port", "{port}"]
    # Braces in values would read as placeholders of the launch line.
    flags = [f.replace("{", "{{").replace("}", "}}") for f in serve_flags(settings)]
    return replace(
        opts,
        url=None,
        engine="reference",
        launch=shlex.join(command + flags),
        tokenizer=base.tokenizer or str(settings["model"]),
    )
