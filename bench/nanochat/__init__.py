"""The workload: a nanochat-faithful GPT base-pretraining trainer (model, optimizers, data, loop)."""
