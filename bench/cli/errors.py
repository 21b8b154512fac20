"""How a command says what went wrong: one red line, its text taken literally.

Messages name scenario tables and keys in TOML's own spelling (``[engine.options]``), which rich
would otherwise read as markup and drop; every command prints its errors through here.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

__all__ = ["print_error"]


def print_error(console: Console, message: object) -> None:
    """Print ``message`` in red, with no markup read from it."""
    console.print(Text(str(message), style="red"))
