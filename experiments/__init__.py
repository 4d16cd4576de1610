"""Experiment tooling: sweeps, reports and benchmarks."""
