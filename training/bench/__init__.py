"""The benchmarks behind `assocmem bench` (parsed in cli/bench.py): forms, breakdown, scaling, decode, train;
timing.py measures."""
