from . import attentions, backbones, dense_heads, detectors, necks  # noqa: F401  (registers into ATTENTIONS and MODELS)
