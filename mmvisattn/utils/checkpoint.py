"""Checks shared by the model converters: does a converted state dict fit a config's backbone?"""
from typing import Dict, List, Optional

from torch import Tensor


def check_backbone_weights(config: str, weights: Dict[str, Tensor]) -> List[str]:
    """Build the backbone of ``config`` and compare: returns the parameter names ``weights`` leaves
    newly initialised; raises ``ValueError`` (one line) for a key without a place or a shape that
    does not fit (a checkpoint of another width). A ``backbone.`` prefix is accepted."""
    from mmvisattn.registry import build_from_config
    expected = build_from_config(config, 'backbone').state_dict()
    prefix = 'backbone.' if any(k.startswith('backbone.') for k in weights) else ''
    weights = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        raise ValueError(f'{len(unexpected)} checkpoint keys have no place in the backbone of {config}, '
                         f'e.g. {unexpected[:3]}')
    for key, value in weights.items():
        if value.shape != expected[key].shape:
            raise ValueError(f'checkpoint {key} has shape {tuple(value.shape)}, the backbone of {config} '
                             f'expects {tuple(expected[key].shape)} (a checkpoint of another width?)')
    return sorted(set(expected) - set(weights))


def save_converted(converted: Dict[str, Tensor], dst: str, config: Optional[str] = None) -> None:
    """The end every converter shares: check against ``config`` (when given) and report what stays
    newly initialised, exit in one line when the weights do not fit, then save ``dst``."""
    import torch
    if config:
        try:
            new = check_backbone_weights(config, converted)
        except ValueError as exc:
            raise SystemExit(f'error: {exc}') from None
        print(f'newly initialised in the backbone ({len(new)}): ' + (', '.join(new) if new else 'none'))
    torch.save({'state_dict': converted}, dst)
    print(f'saved {dst}')
