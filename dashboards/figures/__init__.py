"""One module per figure of a run: headline, latency, per-user TPS, timeline, steps, roofline."""
