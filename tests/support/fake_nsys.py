"""A stand-in for Nsight Systems' ``nsys`` executable, for `bench run --nsys` without a GPU.

``install_fake_nsys(folder)`` writes ``folder/nsys``, a script that, called as ``nsys profile
-t TRACE -o OUT --force-overwrite=true PROGRAM...``, runs PROGRAM as its child, records every
signal it gets itself (forwarding it to PROGRAM, as a profiler would end its collection), and,
once PROGRAM exits, writes ``OUT.nsys-rep``: JSON with the signals nsys got, PROGRAM's exit code
and the command lines of the process group's other members alive when PROGRAM exited
(``left_at_exit``: a program that did not wait for its children) and 5 s later
(``left_in_group``: children left running).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

_SCRIPT = r"""#!{python}
import json, os, signal, subprocess, sys, time
import psutil

args = sys.argv[1:]
assert args[0] == "profile", args
out = args[args.index("-o") + 1]
program = args[args.index("--force-overwrite=true") + 1 :]
got = []
child = subprocess.Popen(program)

def on_signal(signum, frame):
    got.append(signal.Signals(signum).name)
    child.send_signal(signum)

signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
code = child.wait()

def left():
    me, group = os.getpid(), os.getpgid(0)
    alive = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid != me and os.getpgid(p.pid) == group and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(p.info["cmdline"] or []))
        except (OSError, psutil.Error):
            pass
    return alive

at_exit = left()
deadline = time.monotonic() + 5.0
while left() and time.monotonic() < deadline:
    time.sleep(0.1)
report = {{"signals": got, "program_exit": code, "left_at_exit": at_exit, "left_in_group": left()}}
with open(out + ".nsys-rep", "w") as f:
    json.dump(report, f)
sys.exit(code)
"""


def install_fake_nsys(folder: Path) -> Path:
    """Write the fake ``nsys`` into ``folder`` (put it first on PATH); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nsys"
    path.write_text(_SCRIPT.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def read_fake_report(path: Path) -> dict[str, Any]:
    """What the fake nsys wrote into its report (see the module docstring)."""
    return json.loads(path.read_text())
