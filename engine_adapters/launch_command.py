"""`--launch`: start an external engine through its adapter, on 127.0.0.1, and wait for it.

Two forms:
    * ``--launch "CMD ..."``: the user's own command line. ``{port}``, ``{host}``, ``{model}``
      and ``{exe}`` are filled in; without ``{port}`` the command must say ``--port N`` (the
      engine is then looked for there). The engine must bind 127.0.0.1 or all interfaces.
    * ``--launch-model MODEL`` alone: the adapter's usual command line (``launch_template``)
      for that model, on a free port, with its executable from the engine cache or PATH.

Either way the engine starts in its own process group with the adapter's environment defaults,
``launch`` waits until ``health_path`` answers 200 (or the engine exits, or the adapter's
``launch_timeout_s`` passes) and the caller stops it when the run ends.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine_adapters.base import EngineAdapter
from engine_adapters.engine_cache import find_executable
from engine_adapters.launcher import LaunchedEngine, free_port, launch

__all__ = ["LaunchError", "LaunchPlan", "launch_plan", "start_engine"]

HOST = "127.0.0.1"


class LaunchError(ValueError):
    """The launch command cannot be built; the message says what is missing."""


@dataclass(frozen=True)
class LaunchPlan:
    """A resolved launch: the argv, where the engine will answer, and its environment."""

    command: list[str]
    base_url: str
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 300.0


def _port_from_args(args: Sequence[str]) -> int | None:
    for i, arg in enumerate(args):
        value = None
        if arg == "--port" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise LaunchError(f"--launch: --port {value!r} is not a port number") from None
    return None


def _fill(args: Sequence[str], values: dict[str, str]) -> list[str]:
    filled = []
    for arg in args:
        try:
            filled.append(arg.format(**values))
        except (KeyError, IndexError, ValueError) as exc:
            raise LaunchError(
                f"--launch: cannot fill {arg!r} ({exc}); placeholders are {{port}}, {{host}}, "
                "{model} and {exe}; write literal braces as {{ and }}"
            ) from None
    return filled


def launch_plan(
    adapter: EngineAdapter,
    command: str | Sequence[str] | None = None,
    model: str | None = None,
    *,
    executable: str | None = None,
    extra_args: Sequence[str] = (),
    port: int | None = None,
) -> LaunchPlan:
    """The launch of ``adapter``'s engine (module docstring).

    Args:
        command: the user's command line (a string, split like a shell would, or an argv), or
            None for the adapter's template.
        model: fills ``{model}`` (required by the template).
        executable: fills ``{exe}`` (default: the adapter's executable from the engine cache
            or PATH).
        extra_args: appended to the command (engine flags such as ``-np 8``).
        port: the port to fill in (default: a free one).

    Raises:
        LaunchError: no command and no template, a missing model or executable, or no port.
    """
    chosen = port or free_port(HOST)
    exe = executable or (find_executable(adapter.executable) if adapter.executable else None)
    values = {"host": HOST, "port": str(chosen), "model": model or "", "exe": exe or ""}
    if command is None:
        if adapter.launch_template is None:
            raise LaunchError(
                f'engine {adapter.name!r} has no usual command line; give --launch "CMD"'
            )
        if not model:
            raise LaunchError(f"--launch for {adapter.name}: give the model (--launch-model DIR)")
        if "{exe}" in " ".join(adapter.launch_template) and not exe:
            raise LaunchError(
                f"--launch for {adapter.name}: {adapter.executable!r} is neither in the engine "
                "cache nor on PATH; install it (benchmarks/engines/) or pass its path"
            )
        args = _fill(adapter.launch_template, values)
    else:
        raw = shlex.split(command) if isinstance(command, str) else list(command)
        if not raw:
            raise LaunchError("--launch: the command is empty")
        text = " ".join(raw)
        args = _fill(raw, values)
        if "{port}" not in text:
            found = _port_from_args(args)
            if found is None:
                raise LaunchError(
                    "--launch: put {port} in the command (e.g. --port {port}) or give --port N, "
                    "so bench knows where the engine listens"
                )
            chosen = found
    env = {k: v for k, v in adapter.launch_env.items() if k not in os.environ}
    return LaunchPlan(
        [*args, *extra_args], f"http://{HOST}:{chosen}", env, adapter.launch_timeout_s
    )


def start_engine(adapter: EngineAdapter, plan: LaunchPlan) -> LaunchedEngine:
    """Start ``plan`` and wait until the adapter's health path answers (see launcher.launch).

    Raises:
        engine_adapters.launcher.EngineStartError: it exited or was not healthy in time.
    """
    return launch(plan.command, plan.base_url, adapter.health_path, plan.timeout_s, plan.env)
