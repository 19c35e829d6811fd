# Runtime of every mmvisattn segmentation config: the stock mmseg runtime plus the import that
# registers mmvisattn's models and applies its torch 2.13 compatibility shims.
_base_ = 'mmseg::_base_/default_runtime.py'

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
