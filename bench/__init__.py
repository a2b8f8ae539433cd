"""Benchmarks of the policy webhook: HTTP under load, state at scale, and growth with size.

Not part of the test suite. `python -m bench` runs every part and writes `bench/out/results.json`,
`docs/performance.png` and `docs/performance.md`; `python -m bench --help` lists the parts.
"""
