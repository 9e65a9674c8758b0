"""``python -m assocmem.cli ...`` (what the ``assocmem`` console script runs; torchrun takes this form)."""
import sys

from assocmem.cli import main

sys.exit(main())
