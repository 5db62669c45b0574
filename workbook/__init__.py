"""Shared helpers for the notebooks and tests: bug catalog and hybrids, extra toy tasks, plots, widgets."""

import torch

# The models here are tiny: one intra-op thread is faster, and leaves the second core to Jupyter.
torch.set_num_threads(1)
