# Runtime of every mmvisattn detection config: the stock mmdet runtime, the safeguard hooks
# (safeguard_hooks.py) and the import that registers mmvisattn's models and applies its
# compatibility patches (mmvisattn/compat.py).
_base_ = ['mmdet::_base_/default_runtime.py', './safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
