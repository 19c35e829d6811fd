"""The pytest plugin of both passes of the stock suites (``-p plugin``, loaded before collection).

``MMVISATTN_STOCK_PASS=mmvisattn`` imports mmvisattn, as
``custom_imports=dict(imports=['mmvisattn'])`` does in a user's run. The plain pass imports nothing
of the package but the two torchvision schemas (``mmvisattn/utils/torchvision_schemas.py``, loaded
by its path): where PyPI's torchvision, a CUDA build, does not load beside the CPU torch, every test
that reaches mmpretrain or the Runner's visualiser would fail in the plain pass and compare nothing.

``MMVISATTN_STOCK_CONFIGS`` points mmdet's ``get_detector_cfg`` at the release's ``configs/`` (it
looks for them beside the installed package, where a wheel has none), in both passes alike.
"""
import importlib.util
import os
from pathlib import Path

PASS = os.environ.get('MMVISATTN_STOCK_PASS', 'plain')

if PASS == 'mmvisattn':
    import mmvisattn  # noqa: F401
else:
    _path = Path(__file__).resolve().parents[2] / 'mmvisattn/utils/torchvision_schemas.py'
    _spec = importlib.util.spec_from_file_location('stock_torchvision_schemas', _path)
    _schemas = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_schemas)
    _schemas.import_torchvision_without_its_ops()


def pytest_configure(config) -> None:
    configs = os.environ.get('MMVISATTN_STOCK_CONFIGS')
    if configs:
        from mmdet.testing import _utils
        _utils._get_config_directory = lambda: configs
