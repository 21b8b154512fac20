"""The walk of one engine setting from `bench run` to the engine's scheduler, traced as it runs.

Runs `bench run --set max_num_seqs=<mark>` against the reference engine (the tiny preset, a few
requests) with a profiler hook in every process of the run (this one, the `bench serve` process
and its engine core), and records each call of the project's code that receives the setting in
any form: the `--set` text, a settings mapping, a `--max-num-seqs` command line, an
`EngineConfig` or its scheduler settings, or an object holding one of those. A *room* is a
file of the project; the walk is the order in which the setting enters rooms, and a *climb*
is a move from a room of a lower package layer to a higher one (the layers of pyproject.toml's
first import contract: bench over dashboards and engine_adapters over engine, loadgen and probes
over results over perfmodel).

    python benchmarks/setting_walk.py            # the rooms in order, then the counts

Prints the rooms entered in order and the counts; `--json` prints them as JSON. Run it on two
commits (a worktree of each, this script copied beside) to compare how a setting travels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Where the setting takes effect: the walk ends when it leaves the scheduler.
DESTINATION = os.path.join("engine", "core", "scheduler.py")
# A value no default takes, so that finding it means finding the setting.
MARK = 7
LAYERS = {"bench": 4, "dashboards": 3, "engine_adapters": 3, "engine": 2, "loadgen": 2,
          "probes": 2, "results": 1, "perfmodel": 0}  # fmt: skip

# The hook each process of the run loads (sitecustomize runs at every interpreter's start).
_HOOK = textwrap.dedent(
    """
    import dataclasses, os, sys, threading
    from collections.abc import Mapping
    _ROOT = os.environ["SETTING_WALK_ROOT"]
    _OUT = os.environ["SETTING_WALK_OUT"]
    _MARK = int(os.environ["SETTING_WALK_MARK"])
    _NAME = "max_num_seqs"
    _FLAG = "--max-num-seqs"
    _last = [None]

    def _carries(v, depth=0):
        if isinstance(v, str):
            return v.replace("-", "_").startswith(_NAME + "=") and v.endswith(str(_MARK))
        if isinstance(v, (int, float, bool)) or v is None or depth > 2:
            return False
        if isinstance(v, Mapping):
            if v.get(_NAME) == _MARK:
                return True
            return any(_carries(x, depth + 1) for x in list(v.values())[:64])
        if type(v) in (list, tuple):
            items = list(v)[:256]
            if any(isinstance(x, str) and x == _FLAG for x in items):
                return True
            return any(_carries(x, depth + 1) for x in items[:64])
        if getattr(v, _NAME, None) == _MARK:
            return True
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = dataclasses.fields(v)
            return any(_carries(getattr(v, f.name, None), depth + 1) for f in fields)
        return False

    def _hook(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(_ROOT) or "/.venv/" in path or "/tests/" in path:
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        f_locals = frame.f_locals
        for name in names:
            if name in ("self", "cls"):  # what a method's object holds is not passed on
                continue
            v = f_locals.get(name)
            try:
                found = (name == _NAME and v == _MARK) or _carries(v)
            except Exception:  # a value that cannot be asked (an array's truth, say)
                found = False
            if found:
                room = os.path.relpath(path, _ROOT)
                entry = f"{room}:{code.co_name}:{name}"
                if entry != _last[0]:
                    _last[0] = entry
                    with open(_OUT, "a") as f:
                        f.write(f"{os.getpid()} {_caller(frame.f_back)} {entry}\\n")
                return

    def _caller(frame):
        # The nearest frame of the project's code: the room that made the call ("-" for none,
        # as at a process's start).
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(_ROOT) and "/.venv/" not in path and "/tests/" not in path:
                return os.path.relpath(path, _ROOT)
            frame = frame.f_back
        return "-"

    sys.setprofile(_hook)
    threading.setprofile(_hook)
    """
)


def walk(root: Path, runs_dir: Path) -> list[tuple[int, str, str]]:
    """The (pid, calling room, room:function:parameter) entries of one traced `bench run`, in
    order."""
    with tempfile.TemporaryDirectory() as hook_dir:
        Path(hook_dir, "sitecustomize.py").write_text(_HOOK)
        out = Path(hook_dir, "walk.txt")
        env = {**os.environ, "SETTING_WALK_ROOT": str(root) + os.sep,
               "SETTING_WALK_OUT": str(out), "SETTING_WALK_MARK": str(MARK),
               "PYTHONPATH": os.pathsep.join([hook_dir, str(root)])}  # fmt: skip
        command = [sys.executable, "-m", "bench", "run", "--scenario", "1-user",
                   "--num-requests", "2", "--output-len", "4", "--set", f"max_num_seqs={MARK}",
                   "--runs-dir", str(runs_dir), "--no-history", "--no-probes",
                   "--no-live"]  # fmt: skip
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"bench run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        lines = out.read_text().splitlines() if out.exists() else []
    return [(int(pid), caller, entry) for pid, caller, entry in (ln.split(" ", 2) for ln in lines)]


def rooms(entries: list[tuple[int, str, str]]) -> dict[str, object]:
    """The rooms in the order first entered, the calls that carry the setting from one room to
    another, and the climbs among them (a call from a lower layer into a higher one), up to
    the scheduler (:data:`DESTINATION`), where the setting takes effect; what reads it back
    from run.json afterwards is not its way to the engine. A process's first call has no
    calling room: it is counted as a process crossed into."""
    order: list[str] = []
    calls = climbs = processes = 0
    previous: str | None = None
    for _pid, caller, entry in entries:
        room = entry.split(":", 1)[0]
        if previous == DESTINATION and room != DESTINATION:
            break
        if room not in order:
            order.append(room)
        if caller == "-":
            processes += 1
        elif caller != room:
            calls += 1
            climbs += _layer(room) > _layer(caller)
        previous = room
    return {"rooms": order, "rooms_entered": len(order), "calls_between_rooms": calls,
            "climbs": climbs, "processes": processes}  # fmt: skip


def _layer(room: str) -> int:
    return LAYERS.get(room.split(os.sep, 1)[0], -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to trace")
    parser.add_argument("--json", action="store_true", help="print the walk as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs_dir:
        walked = rooms(walk(args.root.resolve(), Path(runs_dir)))
    if args.json:
        print(json.dumps(walked, indent=2))
        return
    for i, room in enumerate(walked["rooms"], 1):  # type: ignore[arg-type]
        print(f"{i:3d}  {room}")
    print(f"rooms entered {walked['rooms_entered']}, calls between rooms "
          f"{walked['calls_between_rooms']}, climbs back up {walked['climbs']}, processes "
          f"{walked['processes']}")  # fmt: skip


if __name__ == "__main__":
    main()
