"""Runs into raw snapshots: collection plans, the collect driver (simulated and real testbeds, Ray),
the C runtime/collector bindings, host topology discovery and legacy import."""
