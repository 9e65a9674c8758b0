"""assocmem: sequence mixers as specs (memory, attentional bias, retention, optimizer), their derived
and verified fast forms, hybrid HF language models, training and probes.

Importing the package registers the models with transformers' Auto classes (model_type
"assocmem"), so a saved folder loads with ``AutoModelForCausalLM.from_pretrained(folder)`` and
needs no ``trust_remote_code``. The floors:
``assocmem.memories`` < ``mixers`` < ``models`` < ``training`` < ``probes``.
"""
from importlib.metadata import PackageNotFoundError, version

from assocmem.models import AssocMemConfig, AssocMemForCausalLM, AssocMemModel, HybridConfig

try:
    __version__ = version("assocmem")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["AssocMemConfig", "AssocMemForCausalLM", "AssocMemModel", "HybridConfig", "__version__"]
