"""The emulated GPUs' memory, as CUDA's caching allocator reports it (c10/cuda/CUDACachingAllocator.cpp).

Runs in the child; pure Python (no torch import): :mod:`devices` tells it each storage placed on a GPU
and when that storage is freed. Every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``);
``memory_allocated`` is the sum of the rounded sizes of the live storages on the device (a view is its
storage's, so it adds nothing). Reserved memory follows the allocator's segment sizes: requests up to
1 MiB share 2 MiB segments, requests up to 10 MiB share 20 MiB ones, larger ones get a segment of their
own rounded up to 2 MiB; a segment is kept until ``empty_cache()``. The model places blocks without
fragmentation, so its reserved figure is the least a GPU would hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ampfix.runner.trace.observe import Site

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: up to this, a request comes from the small pool
SMALL_SEGMENT = 2 << 20  # kSmallBuffer
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: below this, large-pool requests share 20 MiB segments
LARGE_SEGMENT = 20 << 20  # kLargeBuffer
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_up(size: int, unit: int) -> int:
    return -(-size // unit) * unit


def block_size(nbytes: int) -> int:
    """What the allocator takes for a request of ``nbytes`` (0 bytes take nothing)."""
    return round_up(nbytes, MIN_BLOCK) if nbytes > 0 else 0


def segment_size(block: int) -> int:
    """The segment cudaMalloc'd when no cached one has room for ``block``."""
    if block <= SMALL_SIZE:
        return SMALL_SEGMENT
    if block < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return round_up(block, ROUND_LARGE)


def format_size(size: int) -> str:
    """c10's format_size, as the out-of-memory message writes sizes."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576:.2f} MiB"
    return f"{size / 1073741824:.2f} GiB"


@dataclass
class _Pool:
    allocated: int = 0
    reserved: int = 0

    def needs(self, block: int) -> int:
        """The bytes a new segment takes for ``block`` (0: a cached segment has room)."""
        return 0 if self.reserved - self.allocated >= block else segment_size(block)

    def take(self, block: int) -> None:
        self.reserved += self.needs(block)
        self.allocated += block


@dataclass
class DeviceMemory:
    """One emulated GPU's counters, named as ``torch.cuda.memory_stats()`` names them."""

    index: int
    small: _Pool = field(default_factory=_Pool)
    large: _Pool = field(default_factory=_Pool)
    peak_allocated: int = 0
    peak_reserved: int = 0
    peak_site: Site | None = None
    allocations: int = 0  # live blocks
    allocated_total: int = 0  # bytes ever allocated
    freed_total: int = 0
    num_ooms: int = 0

    @property
    def allocated(self) -> int:
        return self.small.allocated + self.large.allocated

    @property
    def reserved(self) -> int:
        return self.small.reserved + self.large.reserved

    def pool(self, block: int) -> _Pool:
        return self.small if block <= SMALL_SIZE else self.large

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        for name, current, peak in (
            ("allocated_bytes", self.allocated, self.peak_allocated),
            ("active_bytes", self.allocated, self.peak_allocated),
            ("reserved_bytes", self.reserved, self.peak_reserved),
        ):
            stats[f"{name}.all.current"] = current
            stats[f"{name}.all.peak"] = peak
        stats["allocated_bytes.all.allocated"] = self.allocated_total
        stats["allocated_bytes.all.freed"] = self.freed_total
        stats["allocation.all.current"] = self.allocations
        stats["num_alloc_retries"] = 0
        stats["num_ooms"] = self.num_ooms
        return dict(sorted(stats.items()))


class GpuOutOfMemory(Exception):
    """Raised by :meth:`GpuMemory.allocate` past the GPU's size; :mod:`devices` raises torch's own error."""


class GpuMemory:
    """The caching allocator's counters for each emulated GPU, and its refusal past the GPU's size."""

    def __init__(self, gpus: int, capacity: int | None, site: Callable[[], Site]) -> None:
        self.capacity = capacity  # bytes; None: no limit (the host's memory is the limit)
        self.devices = [DeviceMemory(index) for index in range(gpus)]
        self._site = site  # where the script is now (sites.find_site), asked only at a new peak

    def add_devices(self, count: int) -> None:
        self.devices.extend(DeviceMemory(index) for index in range(len(self.devices), count))

    def allocate(self, index: int, nbytes: int) -> int:
        """Count a storage of ``nbytes`` placed on GPU ``index``; the block size to free it with."""
        memory = self.devices[index]
        block = block_size(nbytes)
        if block == 0:
            return 0
        segment = memory.pool(block).needs(block)
        if self.capacity is not None and memory.reserved + segment > self.capacity:
            memory.num_ooms += 1
            raise GpuOutOfMemory(self._out_of_memory_message(memory, segment))
        memory.pool(block).take(block)
        memory.allocations += 1
        memory.allocated_total += block
        if memory.allocated > memory.peak_allocated:
            memory.peak_allocated = memory.allocated
            memory.peak_site = self._site()
        memory.peak_reserved = max(memory.peak_reserved, memory.reserved)
        return block

    def free(self, index: int, block: int) -> None:
        if block == 0:
            return
        memory = self.devices[index]
        memory.pool(block).allocated -= block
        memory.allocations -= 1
        memory.freed_total += block

    def empty_cache(self) -> None:
        for memory in self.devices:
            memory.small.reserved = round_up(memory.small.allocated, SMALL_SEGMENT)
            memory.large.reserved = round_up(memory.large.allocated, ROUND_LARGE)

    def reset_peak(self, index: int) -> None:
        memory = self.devices[index]
        memory.peak_allocated, memory.peak_reserved, memory.peak_site = memory.allocated, memory.reserved, None

    def free_and_total(self, index: int, host_total: int) -> tuple[int, int]:
        total = self.capacity if self.capacity is not None else host_total
        return max(0, total - self.devices[index].reserved), total

    def _out_of_memory_message(self, memory: DeviceMemory, segment: int) -> str:
        """c10's message; the size it tried is the segment's, as cudaMalloc was asked for it."""
        capacity = self.capacity or 0
        free = max(0, capacity - memory.reserved)
        unallocated = memory.reserved - memory.allocated
        return (
            f"CUDA out of memory. Tried to allocate {format_size(segment)}. GPU {memory.index} has a total capacity "
            f"of {format_size(capacity)} of which {format_size(free)} is free. Including non-PyTorch memory, this "
            f"process has {format_size(memory.reserved)} memory in use. Of the allocated memory "
            f"{format_size(memory.allocated)} is allocated by PyTorch, and {format_size(unallocated)} is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def report(self) -> list[dict[str, Any]]:
        """Each GPU the script allocated on: its peak, where the peak was reached, its peak reservation."""
        return [
            {
                "device": f"cuda:{memory.index}",
                "peak_allocated": memory.peak_allocated,
                "peak_reserved": memory.peak_reserved,
                "allocated_at_exit": memory.allocated,
                "peak_file": memory.peak_site.file if memory.peak_site else None,
                "peak_line": memory.peak_site.line if memory.peak_site else None,
                "out_of_memory": memory.num_ooms,
            }
            for memory in self.devices
            if memory.allocated_total
        ]
