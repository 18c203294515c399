"""What the child records of the script: the recorder and its JSON, the script's line of a call, and the training
loop's steps and losses (``training_hooks``, the one module here that imports torch); and the shapes every patch
shares. ``observe``, ``sites`` and ``patching`` are standard library only: the child loads them before torch.
"""
