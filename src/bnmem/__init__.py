"""bnmem: does Batch Normalization amplify memorization and membership leakage?"""
__version__ = "0.1.0"
