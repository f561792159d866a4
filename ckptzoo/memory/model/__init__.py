"""What a checkpoint plan costs and how one is chosen: the budget, the cost table, the peak model, the solver, the per-shape model and buckets."""
