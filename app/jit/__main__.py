"""`python -m app.jit`: compile the kernels into the machine's cache (`make install` runs it)."""

import sys

from app.jit import cache_root
from app.jit.warm import is_warm, warm

if is_warm():
    print(f"kernels: cache warm ({cache_root()})")
else:
    print(f"kernels: compiling into {cache_root()} (once per machine) ...", flush=True)
    print(f"kernels: compiled in {warm():.0f} s")
sys.exit(0)
