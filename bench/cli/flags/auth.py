"""`--api-key` and `--header`, declared once for every command that drives an endpoint.

`bench run`, `bench sweep` and `bench ab` take them the same way: ``--api-key`` (default
``$OPENAI_API_KEY``, as the OpenAI clients read it) becomes ``Authorization: Bearer KEY``;
each ``--header 'Name: value'`` is sent as given, a later one replacing an earlier one of the
same name (so an explicit ``Authorization`` header wins over the key). The values are kept in a
loadgen.client.auth.RequestHeaders, which never shows them, and nothing writes them down.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer

from loadgen.client.auth import RequestHeaders

__all__ = ["API_KEY_ENV", "API_KEY_OPTION", "HEADER_OPTION", "request_headers"]

API_KEY_ENV = "OPENAI_API_KEY"

API_KEY_OPTION = typer.Option(
    "--api-key",
    envvar=API_KEY_ENV,
    show_envvar=True,
    show_default=False,
    metavar="KEY",
    help="The endpoint's key, sent as 'Authorization: Bearer KEY' with every request (load, "
    "/v1/models, /metrics, /debug); never written to the run folder or printed.",
)
HEADER_OPTION = typer.Option(
    "--header",
    show_default=False,
    metavar="'NAME: VALUE'",
    help="'Name: value' sent with every request to the endpoint (repeatable; an "
    "'Authorization' header wins over --api-key); values are never written or printed.",
)


def request_headers(api_key: str | None, headers: Sequence[str] | None) -> RequestHeaders:
    """The headers of the two options.

    Raises:
        loadgen.client.auth.HeaderError: a malformed --header or --api-key (the message names
            the option, never the value).
    """
    return RequestHeaders.from_options(api_key, headers or ())
