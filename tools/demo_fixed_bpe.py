"""`nmt demo` with a given BPE model instead of a freshly learned one (youtokentome's learner is not
deterministic), so that two nmt versions can be compared: python demo_fixed_bpe.py OUT BPE_MODEL"""
import shutil
import sys
from pathlib import Path

import torch

try:
    import nmt.workflows.demo as demo
except ImportError:  # a commit before the layered packages (tools/bitcheck.sh OLD_COMMIT across the move)
    import nmt.demo as demo  # type: ignore[no-redef]

torch.set_num_threads(1)
fixed = Path(sys.argv[2])
demo.train_bpe = lambda inputs, out, **kw: shutil.copy(fixed, out)
result = demo.run_demo(Path(sys.argv[1]))
for s in result.scores:
    print(s.metric, s.score)
