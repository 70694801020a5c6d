"""The `ledger` process's settings for itself (ledger/process.py): the allocator settings of the processes that
allocate large arrays once and exit (the output parser's worker, `ledger record` after its launch)."""

from __future__ import annotations

import subprocess
import sys

_REUSE = """
import resource, sys
from ledger.process import reuse_freed_memory
if sys.argv[1] == "on":
    reuse_freed_memory()
size = 40 << 20  # above glibc's largest automatic threshold (32 MiB): mapped afresh each time by default
block = bytearray(size)
block[::4096] = b"x" * len(block[::4096])
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(size)
block[::4096] = b"x" * len(block[::4096])
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_a_process_reuses_the_memory_it_frees() -> None:
    """With these allocator settings a large block freed and allocated again comes back without faulting in
    fresh pages (each of which the kernel zeroes); with glibc's defaults it is mapped afresh."""
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _REUSE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    pages = (40 << 20) // 4096
    assert faults("off") > pages // 2  # the default: every page faulted in again
    assert faults("on") < pages // 20


def test_the_arrow_pool_follows_only_when_asked() -> None:
    """With ``arrow`` Arrow allocates through the system allocator (so under the same settings); without it Arrow's
    own pool is left alone."""
    code = ("import sys, pyarrow as pa; from ledger.process import reuse_freed_memory; "
            "reuse_freed_memory(arrow=sys.argv[1] == 'on'); print(pa.default_memory_pool().backend_name)")

    def backend(mode: str) -> str:
        return subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert backend("on") == "system"
    assert backend("off") != "system"
