"""Launches the training script in a child process with the flag set in its environment."""

import os
import subprocess
import sys

env = dict(os.environ, XLA_USE_BF16="1", PJRT_DEVICE="CPU")
subprocess.run([sys.executable, "train_legacy_bf16.py", "--bf16"], env=env, check=True)
