"""Shared test setup: one torch thread (the machine's 2 cores are shared)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

try:  # torch is heavy; only pin threads if something already needs it
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass
