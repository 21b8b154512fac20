"""The quality column of `bench techniques`: is a technique's output right, and what does it
cost in logits, before any of its speed is shown?

Per row, the study's engine (its model, dtype float32 so that an exact technique can be held
to identical tokens, its fixed settings) runs the same prompts with the technique off and on
in this process (bench.experiments.switch_quality: teacher-forced logits, greedy agreement, and
for a lossy storage its emulation). A row whose output is wrong shows "wrong output" and no
speedup; a technique that swaps the model itself (GQA's presets) has no quality to compare.
"""

from __future__ import annotations

from bench.experiments.switch_quality import SwitchQuality, judged_quality
from bench.scenario.engine_sets import SettingValue
from bench.techniques.studies import Study

# The placement of a row whose technique answered wrong (its speed is then not shown).
WRONG_OUTPUT = "wrong output"
# The model the studies' scenarios serve (the reference engine's default preset).
_STUDY_MODEL = "tiny"


def quality_settings(study_: Study, off: SettingValue) -> dict[str, SettingValue]:
    """The flat engine settings of the row's comparison with the technique ``off`` (judged in
    float32 by switch_quality.judged_settings, whatever the study's dtype)."""
    return {"model": _STUDY_MODEL, "device": "cpu", "seed": 0, **study_.fixed,
            **study_.measured_only, "max_model_len": 256, study_.switch: off}  # fmt: skip


def row_quality(study_: Study, off: SettingValue, on: SettingValue) -> SwitchQuality | None:
    """The technique's quality (module docstring), or None where the switch changes the model
    itself rather than how it is computed."""
    return judged_quality(quality_settings(study_, off), {study_.switch: on})
