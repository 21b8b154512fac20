"""The run folder's JSON documents, declared once: run.json and summary.json.

Each is a TypedDict (the file's JSON shape stays visible and readers keep indexing it as a dict)
with an integer ``schema_version`` written first into the file. Writers go through
results.folder.run_folder.RunFolder (``write_run_json``, ``write_summary``), which check a document
with
``check_*`` before it lands; results.folder.run_folder.load_run reads through ``upgrade_*``, the
one place
that turns an older version into the current one and refuses a newer one, naming the file. The
parquet tables' columns are declared by results.folder.records and results.folder.tables.
"""

from results.schema.check import SchemaError, check_document, schema_version_of
from results.schema.run_json import (
    RUN_JSON_VERSION,
    Analytic,
    ClientClock,
    EngineDeath,
    EngineSection,
    Hardware,
    Interruption,
    Precision,
    Recorded,
    Roofs,
    RunJson,
    Simulation,
    TokenizerSection,
    TokenizerSourceKind,
    check_run_json,
    upgrade_run_json,
)
from results.schema.summary_json import (
    SUMMARY_JSON_VERSION,
    Counts,
    Distribution,
    Errors,
    Goodput,
    Reasoning,
    StatusCounts,
    SummaryJson,
    Throughput,
    Tokens,
    TopError,
    Usability,
    Window,
    check_summary_json,
    upgrade_summary_json,
)

__all__ = [
    "RUN_JSON_VERSION",
    "SUMMARY_JSON_VERSION",
    "Analytic",
    "ClientClock",
    "Counts",
    "Distribution",
    "EngineDeath",
    "EngineSection",
    "Errors",
    "Goodput",
    "Hardware",
    "Interruption",
    "Precision",
    "Reasoning",
    "Recorded",
    "Roofs",
    "RunJson",
    "SchemaError",
    "Simulation",
    "StatusCounts",
    "SummaryJson",
    "Throughput",
    "TokenizerSection",
    "TokenizerSourceKind",
    "Tokens",
    "TopError",
    "Usability",
    "Window",
    "check_document",
    "check_run_json",
    "check_summary_json",
    "schema_version_of",
    "upgrade_run_json",
    "upgrade_summary_json",
]
