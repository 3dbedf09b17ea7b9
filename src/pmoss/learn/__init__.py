"""Tokens into models: the Decision Transformer network, the learners (DT, BC, CQL; one file each),
training with Lightning/Ray, model bundles, the rollout that turns a snapshot into a schedule."""
