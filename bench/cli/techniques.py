"""`bench techniques`: the lectures' table of optimizations, measured here and predicted on GPUs.

Registered on the main app by :func:`register`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bench.cli.flags.shared import RunsDir, declared
from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.messages import print_error, print_path
from bench.run.terminal import terminal_console

console = terminal_console()


@declared
def techniques(
    *,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", metavar="", help="Smaller workloads: the same comparisons, sooner."
        ),
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="A technique to run (kv_cache, gqa, int8, int4, speculative, "
            "continuous_batching, paged_attention, flash_attention, prefix_caching); repeat "
            "for more. Default: all.",
        ),
    ] = None,
    runs_dir: RunsDir,
) -> None:
    """Measure what each optimization buys on the reference engine, beside the lectures' claim
    and the simulated device's prediction for Llama-3-8B and -70B on A100 and H100."""
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.orchestrate import RunError
    from bench.techniques.render import render_techniques
    from bench.techniques.table import run_techniques
    from dashboards.pages.techniques import write_techniques_page

    try:
        path = run_techniques(runs_dir, console, quick=quick, only=only)
    except ValueError as e:  # an unknown --only name, a setting the engine refuses
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        from bench.cli.interrupted import end_interrupted

        end_interrupted(e, console)
    render_techniques(path, console)
    page = write_techniques_page(path, path.with_name("techniques.html"))
    print_path(console, "dashboard", page)


def register(app: typer.Typer) -> None:
    """Add techniques to ``app``."""
    app.command()(techniques)
