"""Samplers: what the hardware and the engine did while the load ran.

Samplers (sampler, nvml, cpu, engine_metrics) run at fixed rates in a process of their own
(session, probe_process) and record samples.parquet; nsys wraps Nsight Systems. The peak figures,
the roofline and the capacity model they are read against live in the ground floor (perfmodel);
nothing here imports bench/, the engine or the load generator.
"""
