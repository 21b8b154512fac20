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
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine_adapters.base import EngineAdapter
from engine_adapters.engine_cache import find_executable
from engine_adapters.launcher import LaunchedEngine, free_port, launch

__all__ = ["LaunchError", "LaunchPlan", "launch_plan", "program_of", "start_engine"]

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
    # The option the command came from, which errors name: "--launch" or "--launch-model".
    option: str = "--launch"


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


def program_of(args: Sequence[str]) -> str | None:
    """The program ``args`` runs: its first word, or for ``env [-OPTS] [NAME=VALUE ...] PROG``
    the ``PROG`` after env's options and assignments (None when there is none)."""
    rest = list(args)
    if rest and os.path.basename(rest[0]) == "env":
        rest = rest[1:]
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            # env's options that take the next word: -u NAME, -C DIR.
            takes_value = rest[0] in ("-u", "--unset", "-C", "--chdir")
            rest = rest[2:] if takes_value else rest[1:]
    return rest[0] if rest else None


def _check_program(args: Sequence[str], option: str) -> None:
    """Refuse a command whose program cannot be run, naming it (not a traceback from exec)."""
    program = program_of(args)
    if program is None:
        raise LaunchError(f"{option}: the command names no program to run")
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise LaunchError(f"{option}: {program!r} is not an executable file")
    elif shutil.which(program) is None:
        raise LaunchError(f"{option}: {program!r} is not on PATH; install it or give its full path")


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
            The message names ``--launch`` or ``--launch-model``, whichever was given.
    """
    chosen = port or free_port(HOST)
    exe = executable or (find_executable(adapter.executable) if adapter.executable else None)
    values = {"host": HOST, "port": str(chosen), "model": model or "", "exe": exe or ""}
    if command is None:
        if adapter.launch_template is None:
            raise LaunchError(
                f"--launch-model: engine {adapter.name!r} has no usual command line; give "
                '--launch "CMD" instead'
            )
        if not model:
            raise LaunchError(f"--launch-model: give the model for {adapter.name} (a HF dir)")
        if "{exe}" in " ".join(adapter.launch_template) and not exe:
            raise LaunchError(
                f"--launch-model for {adapter.name}: {adapter.executable!r} is neither in the "
                "engine cache nor on PATH; install it (benchmarks/engines/) or give "
                '--launch "PATH/TO/EXE ..."'
            )
        args = _fill(adapter.launch_template, values)
    else:
        raw = shlex.split(command) if isinstance(command, str) else list(command)
        if not raw:
            raise LaunchError("--launch: the command is empty")
        text = " ".join(raw)
        if "{exe}" in text and not exe:
            raise LaunchError(
                f"--launch: {{exe}} stands for {adapter.executable or 'the engine'!r}, which is "
                "neither in the engine cache nor on PATH; install it or write its path"
            )
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
        [*args, *extra_args], f"http://{HOST}:{chosen}", env, adapter.launch_timeout_s,
        option="--launch" if command is not None else "--launch-model",
    )  # fmt: skip


def start_engine(adapter: EngineAdapter, plan: LaunchPlan) -> LaunchedEngine:
    """Start ``plan`` and wait until the adapter's health path answers (see launcher.launch).

    Raises:
        LaunchError: the program (after ``env`` and its assignments) is neither on PATH nor an
            executable file; one line naming it and the option it came from.
        engine_adapters.launcher.EngineStartError: it exited or was not healthy in time.
    """
    _check_program(plan.command, plan.option)
    return launch(plan.command, plan.base_url, adapter.health_path, plan.timeout_s, plan.env)
