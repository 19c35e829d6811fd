# The runtime of every ImageNet (mmpretrain scope) config: mmpretrain's hooks, logging and
# visualiser, the project's models (custom_imports) and its safeguard hooks.
_base_ = ['mmpretrain::_base_/default_runtime.py', './safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
