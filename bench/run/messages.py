"""How commands say things to the user: errors, warnings and notes, their text taken literally.

Messages carry free text (scenario keys in TOML's own spelling such as ``[engine.options]``,
exception texts, paths), which rich would otherwise read as markup and drop; every command and
every step of a run prints through here, only the style comes from the kind of message.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

__all__ = ["print_error", "print_info", "print_note", "print_path", "print_warning"]


def print_error(console: Console, message: object) -> None:
    """What stopped the command, in red."""
    console.print(Text(str(message), style="red"))


def print_warning(console: Console, message: object) -> None:
    """What the command did without, and goes on, in yellow."""
    console.print(Text(str(message), style="yellow"))


def print_note(console: Console, message: object) -> None:
    """What a report leaves out and why, dimmed."""
    console.print(Text(str(message), style="dim"))


def print_info(console: Console, message: object) -> None:
    """A plain line of progress or result (a scenario name, an engine command line), literally."""
    console.print(Text(str(message)))


def print_path(console: Console, label: str, path: object, note: str = "") -> None:
    """``label: PATH`` with the path in bold and taken literally (a folder may hold ``[...]``),
    then ``note`` where given."""
    line = Text(f"{label}: ")
    line.append(str(path), style="bold")
    if note:
        line.append(f" {note}")
    console.print(line)
