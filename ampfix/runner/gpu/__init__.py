"""The emulated GPU, in the child: its devices, memory, autocast op policy and numerics, and their installation.

It owns what a CUDA device would decide (the device a tensor reads, what CUDA refuses, the caching allocator's
figures, which dtype an op gives under autocast); it imports neither the host, the child's start nor apex.
"""
