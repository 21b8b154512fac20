"""The summary's figures, each computed from the run folder's tables: latency, throughput,
attribution, energy, the client's check, per replica."""
