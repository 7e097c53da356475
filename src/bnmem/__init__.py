"""bnmem: does Batch Normalization amplify memorization and membership leakage?"""
from bnmem.core import cpu as _cpu

_cpu.pin()  # before numpy / torch load or dispatch: same bits on every AVX2 machine
__version__ = "0.1.0"
