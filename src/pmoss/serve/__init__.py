"""Models into running schedules: the registry and its promotion gate, `pmoss schedule`, the serving
loop and post-training."""
