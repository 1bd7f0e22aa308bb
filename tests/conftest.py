"""Shared fixtures: small float64 problems with closed-form posteriors."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

import bdlkit
from blr_helpers import blr_data, blr_posterior  # noqa: F401 (re-exported)

# The cores are shared out among the xdist workers (``make test`` runs 2 on 2 cores): torch's
# default of one intra-op thread per core makes each worker spin for the other's core, and
# on this suite's small tensors that costs several times the work itself (one flow test:
# 39 s with one thread per worker against 362 s with the default, both workers busy). The
# processes the tests start inherit the same share through OMP_NUM_THREADS.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS:
    _SHARE = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_SHARE))
    torch.set_num_threads(min(_SHARE, int(os.environ["OMP_NUM_THREADS"])))

# The data files live next to the checkout (``../shared/data``); bdlkit itself only looks
# where it is told (``BDLKIT_DATA``, ``./data``), so the suite tells it, as ``make`` does.
_CHECKOUT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not os.environ.get("BDLKIT_DATA") and _CHECKOUT_DATA.is_dir():
    os.environ["BDLKIT_DATA"] = str(_CHECKOUT_DATA)

# The Ctrl-C tests need SIGINT's default disposition; a launcher that set it to "ignore"
# (some background and CI launches do, and bdlkit rightly keeps an ignored signal ignored)
# would make them fail for reasons outside the code under test. Restore it for the suite,
# and for the processes the tests start (an ignored disposition is inherited across exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# ArviZ writes a daily stamp on import (a temporary file renamed into place, one name for
# every process): two xdist workers importing it at once on a fresh machine race, and the
# loser's collection fails with FileNotFoundError. Write today's stamp first, each worker
# under its own temporary name, so ArviZ finds it and writes nothing.
def _write_arviz_stamp() -> None:
    import datetime

    from platformdirs import user_cache_dir

    stamp = Path(user_cache_dir("arviz", "arviz")) / "daily_warning"
    today = datetime.date.today().isoformat()
    try:
        if stamp.is_file() and stamp.read_text().strip() == today:
            return
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_name(f"daily_warning.{os.getpid()}.tmp")
        tmp.write_text(today)
        os.replace(tmp, stamp)
    except OSError:  # a read-only cache: ArviZ's own write fails the same way, not ours
        pass


_write_arviz_stamp()


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (as under xdist): tiny steps on a busy 2-core machine
    stall with two. Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def blr():
    """A float64 BayesianModel for y = x·w + N(0, 1) noise and its exact posterior."""
    x, y = blr_data()
    net = nn.Linear(3, 1, bias=False).double()
    model = bdlkit.BayesianModel(
        net, likelihood=bdlkit.problems.Gaussian(noise=1.0), prior=2.0, num_data=len(x)
    )
    mean, cov = blr_posterior(x, y, 1.0, 2.0)
    return model, (x, y), mean, cov
