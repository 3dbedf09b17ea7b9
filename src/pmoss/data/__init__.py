"""Raw snapshots into tokens: tokenisation and its statistics, dataset build/validate/report, the worker/group state the model reads."""
