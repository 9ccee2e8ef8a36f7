"""The benchmarks: run them from the checkout's root as modules (`python -m bench.fanout`), or
all of them with `make bench`."""
