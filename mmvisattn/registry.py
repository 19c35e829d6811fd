"""Registries of mmvisattn: ``ATTENTIONS`` holds every token-mixing module (one interface,
:class:`mmvisattn.models.attentions.BaseAttention`); backbones, necks, heads and detectors go
straight into the stock mmdet, mmseg and mmpretrain ``MODELS`` registries (:func:`register_model`),
so configs of each scope build them by ``type``.
"""
import inspect
from typing import Optional, TypeVar

import torch.nn as nn
from mmdet.registry import MODELS as MMDET_MODELS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmseg.registry import MODELS as MMSEG_MODELS

ATTENTIONS = Registry('attention', parent=MMENGINE_MODELS, scope='mmvisattn',
                      locations=['mmvisattn.models.attentions'])

ModelClass = TypeVar('ModelClass', bound=type)


SCOPE_MODELS = {'mmdet': MMDET_MODELS, 'mmseg': MMSEG_MODELS, 'mmpretrain': MMPRETRAIN_MODELS}


def models_of_scope(scope: str) -> Registry:
    """The ``MODELS`` registry of a config's ``default_scope`` (``'mmdet'``, ``'mmseg'`` or
    ``'mmpretrain'``)."""
    if scope not in SCOPE_MODELS:
        raise KeyError(f'default_scope={scope!r}; expected one of {sorted(SCOPE_MODELS)}')
    return SCOPE_MODELS[scope]


def with_data_preprocessor(cfg) -> None:
    """Give ``cfg.model`` the config's top-level ``data_preprocessor`` (where mmpretrain's configs
    keep it) unless the model names its own, as mmengine's Runner does."""
    if cfg.get('data_preprocessor'):
        cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)


def build_from_config(config, part: Optional[str] = None) -> nn.Module:
    """Build ``model`` of a config (a path or ``Config``), or its sub-dict ``part``, in the config's
    ``default_scope``, the backbone's ``init_cfg`` dropped (no pretrained weights looked for)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(config) if not isinstance(config, Config) else config
    init_default_scope(cfg.default_scope)
    cfg.model.get('backbone', {}).pop('init_cfg', None)
    with_data_preprocessor(cfg)
    return models_of_scope(cfg.default_scope).build(cfg.model if part is None else cfg.model[part])


def register_model(cls: ModelClass) -> ModelClass:
    """Class decorator: register ``cls`` in the mmdet, mmseg and mmpretrain ``MODELS``."""
    for registry in SCOPE_MODELS.values():
        registry.register_module(module=cls)
    return cls


def attention_class(cfg: dict) -> type:
    """The ``ATTENTIONS`` class of ``cfg['type']`` whatever the default scope; one line naming a
    missing or unknown type."""
    attn_type = cfg.get('type')
    attn_class = ATTENTIONS.get(attn_type) if attn_type is not None else None
    if attn_class is None:
        raise KeyError(f'unknown attention type {attn_type!r}; registered: '
                       f'{", ".join(sorted(ATTENTIONS.module_dict))}')
    return attn_class


def attention_accepts(cfg: dict, name: str) -> bool:
    """Whether the attention ``cfg`` describes takes the constructor argument ``name``."""
    return name in inspect.signature(attention_class(cfg)).parameters


def build_attention(cfg: dict, optional: Optional[dict] = None, *, owner: str = 'build_attention',
                    num_extra_tokens: Optional[int] = None, **defaults) -> nn.Module:
    """Build an attention from ``cfg`` for tokens with ``num_extra_tokens`` in front
    (:mod:`mmvisattn.models.attentions.base`); ``defaults`` fill keys it leaves out, and so do the
    ``optional`` ones (a stage's window, ratio) where the class takes them, so a backbone offers its
    settings to any attention. A ``cfg`` setting another count, or a class taking none where there
    are some, is refused in one line naming ``owner``; with ``None`` the count is the ``cfg``'s."""
    attn_class = attention_class(cfg)
    attn_type = cfg['type']
    if num_extra_tokens is None:
        num_extra_tokens = cfg.get('num_extra_tokens', 0)
    if cfg.get('num_extra_tokens', num_extra_tokens) != num_extra_tokens:
        raise ValueError(f'{owner}: attn_cfg sets num_extra_tokens={cfg["num_extra_tokens"]!r} for '
                         f'{attn_type}, '
                         f'but its tokens have {num_extra_tokens} in front of the map; leave '
                         f'num_extra_tokens out (the backbone passes it)')
    if attention_accepts(cfg, 'num_extra_tokens'):
        defaults['num_extra_tokens'] = num_extra_tokens
    elif num_extra_tokens:
        raise ValueError(f'{owner}: {attn_type} takes no num_extra_tokens, but its tokens have '
                         f'{num_extra_tokens} in front of the map; expected an attention whose '
                         'constructor takes num_extra_tokens')
    offered = {key: value for key, value in (optional or {}).items() if attention_accepts(cfg, key)}
    args = {**defaults, **offered, **cfg}
    args.pop('type')
    return attn_class(**args)
