"""Training steps run outside the loop and measured: trackers, the peak meter, the probe, timelines, timing."""
