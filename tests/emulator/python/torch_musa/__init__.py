"""The emulator's stand-in for torch_musa, which a MUSA package imports before its native
library: the emulated library needs nothing from it (its kernels run on CPU tensors)."""
