from . import attentions  # noqa: F401  (registers into ATTENTIONS)
