"""apex.parallel, emulated for a single process, for scripts written against NVIDIA apex (deleted in 2025).

Runs in the child, when the script imports ``apex.parallel`` and no installed apex provides it (see
:mod:`provider`). NVIDIA's own examples import it unconditionally and use it only when
``WORLD_SIZE > 1``; the runner runs one process, so:

* ``DistributedDataParallel(module, ...)`` returns the module itself (one process: nothing to all-reduce;
  apex's keyword arguments, ``delay_allreduce``, ``message_size``, ..., change only communication);
* ``convert_syncbn_model(module, ...)`` returns the module as it is (one process: a synchronized batch norm
  computes what the local one does);
* ``SyncBatchNorm`` is ``torch.nn.BatchNorm2d``'s behaviour under apex's name (apex's took the same
  arguments plus ``process_group``/``channel_last``, which one process ignores).

Each use is recorded as emulated at its line, so the run's summary says what stood in for apex.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.sites import find_site

IMPORTED = "apex.parallel (one process: DistributedDataParallel and convert_syncbn_model return the module)"
FEATURE = "apex.parallel (one process: {name} stands in as {what})"
EMULATED_NAMES = ("DistributedDataParallel", "convert_syncbn_model", "SyncBatchNorm")


def populate(module: ModuleType, recorder: Recorder) -> None:
    """Fill the ``apex.parallel`` module object with the single-process stand-ins."""

    def record(name: str, what: str) -> None:
        recorder.emulated_use(FEATURE.format(name=name, what=what), find_site())

    def DistributedDataParallel(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:  # noqa: N802
        record("DistributedDataParallel", "the module itself")
        return module

    def convert_syncbn_model(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        record("convert_syncbn_model", "the module unchanged")
        return module

    class SyncBatchNorm(torch.nn.BatchNorm2d):
        def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                     track_running_stats: bool = True, process_group: Any = None, channel_last: bool = False,
                     fuse_relu: bool = False) -> None:
            record("SyncBatchNorm", "a local batch norm")
            super().__init__(num_features, eps, momentum, affine, track_running_stats)

    module.__doc__ = __doc__
    for name, value in (("DistributedDataParallel", DistributedDataParallel),
                        ("convert_syncbn_model", convert_syncbn_model), ("SyncBatchNorm", SyncBatchNorm)):
        setattr(module, name, value)
