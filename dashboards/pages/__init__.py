"""The HTML pages: a run's report, compare, sweep and ablation, and the page around them."""
