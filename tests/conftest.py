"""Shared test settings: reproducible hypothesis runs, single-threaded torch for stable timing-free tests."""

import os

import torch
from hypothesis import HealthCheck, settings

# Fixed derivation of examples so a failure reproduces on every machine and every run.
settings.register_profile(
    "funrl",
    derandomize=True,
    deadline=None,
    max_examples=int(os.environ.get("FUNRL_HYPOTHESIS_EXAMPLES", "30")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("funrl")

torch.set_num_threads(1)
