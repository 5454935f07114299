"""Benchmarks (run as scripts: python bench/gpu.py)."""
