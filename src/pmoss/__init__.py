"""P-MOSS: a learned spatial scheduler for main-memory indexes on NUMA and chiplet servers."""

__version__ = "0.1.0"
