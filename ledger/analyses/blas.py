"""Small numerical work on one BLAS thread.

numpy's BLAS (OpenBLAS) runs a dot product of a few thousand values on every core it finds. For the small
vectors the analyses use (autocorrelations for a block length, a 400-row least squares) the threads' start
and hand-over cost more than the arithmetic, and on a busy machine far more: measured here under a load
average of 20 on 2 cores, Politis-White's block length of 10,440 samples took 3.96 s on OpenBLAS's default
threads and 0.044 s on one. :func:`one_thread` limits the BLAS libraries already loaded to one thread for a
block of code (threadpoolctl, the maintained tool for it; the controller is made once per process).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_controller: Any = None


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with every loaded BLAS library on one thread (restored afterwards)."""
    global _controller
    from threadpoolctl import ThreadpoolController

    with warnings.catch_warnings():  # e.g. several OpenMP runtimes in one process: not ours to report here
        warnings.simplefilter("ignore")
        if _controller is None:
            _controller = ThreadpoolController()
        limiter = _controller.limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limiter.restore_original_limits()


__all__ = ["one_thread"]
