"""What the notebooks import, and nothing else: the bug catalog and its single-bug hybrids (`catalog`), the
one way to swap functions of the fixed twin (`swap`), extra toy tasks, the health monitor, plots, `live_plot`
sliders, and one helper module per notebook (`nbNN_<subject>`). The practice round is the `interview`
package; browser and benchmark machinery lives with tests/ and bench/."""

import torch

# The models here are tiny: one intra-op thread is faster, and leaves the second core to Jupyter.
torch.set_num_threads(1)
