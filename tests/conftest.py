"""Shared test settings: reproducible hypothesis runs, single-threaded torch for stable timing-free tests."""

import os
import tempfile

# Each pytest-xdist worker compiles into its own inductor cache: workers writing one shared cache
# at once can read each other's half-written kernels ("file too short").
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), f"funrl-inductor-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"),
)

import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

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
