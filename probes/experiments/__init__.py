"""The experiments: what the README's numbers come from, kept apart from the library (README.md here).

Nothing outside this package imports it; the ``assocmem`` dispatcher names ``cli.py`` by string.
"""
