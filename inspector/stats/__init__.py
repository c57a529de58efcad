"""Torch-free statistics the engine layers share (the paired bootstrap)."""
