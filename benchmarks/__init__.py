"""Benchmarks that print figures (`python -m benchmarks.run_all`, `python -m benchmarks.bench_NAME`).

Every benchmark takes `--smoke`: tiny sizes, in one process, seconds; tests/test_benchmarks.py runs them all
so that none breaks unnoticed.
"""
