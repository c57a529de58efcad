"""eagle3-inspector: re-run an EAGLE-3 draft on saved samples and see what its wiring does."""

__version__ = "0.1.0"
