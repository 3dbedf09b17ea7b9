"""The agreements every part reads (docs/design.md §4): machine descriptor, schedule and its baseline
generators, raw snapshot schema, workload, errors, atomic file I/O. Imports nothing above it."""
