"""Secrets out of command lines and messages: what a stored or printed launch line may show.

A launch command line (``--launch "env VLLM_API_KEY=sk-... vllm serve --api-key sk-..."``) is
stored in run.json (``engine.launch_command``) and printed as the engine starts; its secrets
are not. :func:`redact_command` replaces with ``***``:

* the value of a secret-looking flag, as ``--flag value`` or ``--flag=value``: ``--api-key``,
  ``--token``, ``--hf-token``, any ``--*-key``/``--*-keys``/``--*-token`` and any flag naming a
  secret, password or credential (``--ssl-keyfile`` or ``--max-num-batched-tokens`` are not
  secrets and stay);
* the value of a secret-looking assignment ``NAME=value`` (``env VLLM_API_KEY=... vllm ...``,
  ``docker run -e HF_TOKEN=...``): names ending in ``KEY``/``KEYS``/``TOKEN`` after an
  underscore (or being one), and names holding ``SECRET``, ``PASSWORD``, ``PASSWD`` or
  ``CREDENTIAL``;
* inside one argument that is itself a shell line (``bash -c "..."``), the same, by
  :func:`redact_text`.

:func:`redact_text` does the same for free text (an error message quoting the command, an
engine's log tail) and also replaces every known secret value it is given (the values of
:func:`command_secrets`, a request's ``--api-key``) and any ``Bearer <token>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "REDACTED",
    "command_secrets",
    "is_secret_assignment",
    "is_secret_flag",
    "redact_command",
    "redact_text",
]

REDACTED = "***"

_FLAG_SECRET = re.compile(
    r"^(?:.*[-_])?(?:key|keys|token|apikey)$|secret|passw(?:or)?d|credential", re.IGNORECASE
)
_NAME_SECRET = re.compile(
    r"(?:^|_)(?:KEY|KEYS|TOKEN|APIKEY)$|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE
)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_VALUE = r"""("[^"]*"|'[^']*'|[^\s'"]+)"""
_TEXT_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9_.-]*)(=|[ \t]+)" + _VALUE)
_TEXT_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=" + _VALUE)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s'\",}\]]+")


def is_secret_flag(flag: str) -> bool:
    """Whether ``flag`` (``--api-key``, ``-hf-token``; dashes included or not) carries a secret."""
    return bool(_FLAG_SECRET.search(flag.lstrip("-")))


def is_secret_assignment(name: str) -> bool:
    """Whether the variable ``name`` (``VLLM_API_KEY``, ``HF_TOKEN``) holds a secret."""
    return bool(_NAME_SECRET.search(name))


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit()


def redact_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with every secret value replaced by ``***`` (module docstring); idempotent."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("--"):  # a secret flag given without its value
                out.append(REDACTED)
                continue
        if _is_flag(arg):
            flag, eq, _ = arg.partition("=")
            if is_secret_flag(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                hide_next = True
            out.append(arg)
            continue
        match = _ASSIGNMENT.match(arg)
        if match and is_secret_assignment(match.group(1)):
            out.append(f"{match.group(1)}={REDACTED}")
        elif any(c.isspace() for c in arg):
            out.append(redact_text(arg))
        else:
            out.append(arg)
    return out


def command_secrets(argv: Sequence[str]) -> list[str]:
    """The secret values :func:`redact_command` hides in ``argv`` (to scrub them from text the
    command's process wrote, e.g. a log that echoes its arguments)."""
    found: list[str] = []
    for given, shown in zip(argv, redact_command(argv), strict=True):
        if given == shown:
            continue
        if shown == REDACTED:
            found.append(given)
        elif shown.endswith("=" + REDACTED) and "=" in given:
            found.append(given.split("=", 1)[1])
    return [s for s in found if s]


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known ``secrets`` value, every secret flag's or assignment's value
    and every ``Bearer <token>`` replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)

    def flag(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group(1)) or m.group(3).startswith("-"):
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{REDACTED}"

    def assignment(m: re.Match[str]) -> str:
        return f"{m.group(1)}={REDACTED}" if is_secret_assignment(m.group(1)) else m.group(0)

    text = _TEXT_FLAG.sub(flag, text)
    text = _TEXT_ASSIGNMENT.sub(assignment, text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
