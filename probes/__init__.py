"""Probes and the roofline: what the hardware and the engine did while the load ran.

Samplers (sampler, nvml, cpu, engine_metrics) run at fixed rates in a process of their own
(session, probe_process) and record samples.parquet; hardware holds peak figures, calibrate
measures this machine's; roofline is the analytic model (FLOPs and bytes per step), capacity
the KV sizing, roofline_figure the plot, nsys the Nsight Systems wrapper. Nothing here imports
bench/ or the engine's runtime (only perfmodel.model_config and perfmodel.presets, which are plain
data).
"""
