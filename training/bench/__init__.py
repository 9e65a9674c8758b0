"""The benchmarks behind `assocmem bench` (cli.py): forms, breakdown, decode, train; timing.py measures."""
