"""The experiments: what the README's numbers come from, kept apart from the library (README.md here).

No floor imports it; only the command line does (cli/experiment.py, cli/reproduce.py).
"""
