from . import attentions, backbones  # noqa: F401  (registers into ATTENTIONS and MODELS)
