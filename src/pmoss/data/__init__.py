"""Raw snapshots into tokens: tokenisation and its statistics, dataset build/validate/report, state tiles."""
