"""ampfix: migrate deprecated torch.cuda.amp / torch.cpu.amp to torch.amp, and run CUDA scripts on CPU."""

__version__ = "0.2.0"
