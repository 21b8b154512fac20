"""run.json's "analytic" section for an engine on the simulated device.

Beside bench.run.probing, which builds the same section for `bench run` against
`bench serve --device sim`, and apart from bench.sim.simulate, which pulls in the engine (torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfmodel.roofs import Roofs


def simulated_analytic(description: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The analytic section (results.analytic's shape) of an engine whose
    /debug/engine ``description`` says it runs on the simulated device; None for any other.

    The model, precision and TP degree are those simulated; the roofs are the simulated part's
    datasheet peaks, so MFU and MBU read as they would on that hardware.
    """
    sim = (description or {}).get("simulated")
    if not sim:
        return None
    assert description is not None
    model = sim["time_model"]
    roofs = model["roofs"]
    return {
        "model_config": description.get("model_config"),
        "precision": model["precision"],
        "tp": model["tp"],
        "roofs": Roofs(
            name=roofs["name"],
            source=f"simulated device: {roofs['sources'].get('peaks')}",
            compute_dtype=roofs["compute_dtype"],
            flops_per_s=roofs["peak_flops_per_s"],
            bytes_per_s=roofs["peak_bytes_per_s"],
        ).to_dict(),
        "notes": ["simulated device", *(sim.get("notes") or [])],
    }
