"""Shared test settings: reproducible hypothesis runs, single-threaded torch for stable timing-free
tests, and the files that compile or train run first.

CI runs ``pytest -n 2 --dist loadfile``: each file goes whole to one worker, taken from a queue
as a worker runs dry, with no stealing. A long file taken last keeps one worker busy while the
other waits, so the queue starts with the files that hold ``slow`` tests (they compile or train)
and ends with the quick ones, which even out the two workers' finish. pyproject's
``--no-loadscope-reorder`` keeps pytest-xdist from re-sorting the queue by test count, which would
put the one-test compiled files last.
"""

import os
import tempfile

# Compile caches and funrl's saved steps (funrl.control.compile's saved_as) in the temporary folder,
# not the user's. The controller process runs this first and the pytest-xdist workers inherit its
# environment, so they share these folders and reuse each other's compiles (separate folders made
# the suite's run longer): torch writes cache entries atomically and compiles a kernel under a file
# lock, and funrl renames a finished file into place.
for _variable, _prefix in (("TORCHINDUCTOR_CACHE_DIR", "funrl-inductor"), ("FUNRL_CACHE_DIR", "funrl-cache")):
    os.environ.setdefault(_variable, os.path.join(tempfile.gettempdir(), f"{_prefix}-main"))

import pytest  # noqa: E402
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


def slow_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the files that hold a ``slow`` test first; files keep their relative order
    and each file's tests theirs (a file stays one contiguous block, as ``loadfile`` needs)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    return sorted(items, key=lambda item: item.path not in slow_files)  # stable: False sorts first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = slow_files_first(items)
