"""Packaging for mmvisattn. The pinned stack itself is installed by `make install`
(tools/install.sh), because mmcv must be compiled against the local torch first."""
import re
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def read_version() -> str:
    text = (ROOT / 'mmvisattn' / 'version.py').read_text()
    return re.search(r"__version__ = '([^']+)'", text).group(1)


def add_mim_extension() -> None:
    """``mmvisattn/.mim/`` links to the configs, tools and ``model-index.yml``, the layout through
    which ``mim`` (``mim search mmvisattn``, ``mim train mmvisattn CONFIG``) finds a package's
    model zoo, as the OpenMMLab packages lay it out. Links suit the editable install of
    ``make install``."""
    mim_dir = ROOT / 'mmvisattn' / '.mim'
    mim_dir.mkdir(exist_ok=True)
    for name in ('model-index.yml', 'configs', 'tools', 'demo'):
        link = mim_dir / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path('..', '..', name))


def read_requirements(name: str) -> list:
    lines = (ROOT / 'requirements' / name).read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith('#')]


add_mim_extension()
setup(
    name='mmvisattn',
    version=read_version(),
    description='Efficient vision attention for the OpenMMLab detection and segmentation stack',
    long_description=(ROOT / 'README.md').read_text() if (ROOT / 'README.md').exists() else '',
    long_description_content_type='text/markdown',
    python_requires='>=3.10',
    packages=find_packages(include=['mmvisattn', 'mmvisattn.*']),
    # the C++ CPU kernels, compiled on first use (mmvisattn/ops/utils/cpu_extension.py)
    package_data={'mmvisattn.ops': ['*/cpu.cpp'], 'mmvisattn.ops.utils': ['cpu_kernels.h']},
    install_requires=['mmcv>=2.0.0,<2.2.0'] + read_requirements('runtime.txt'),
    extras_require={'tests': read_requirements('tests.txt'), 'deploy': read_requirements('deploy.txt')},
    license='Apache-2.0',
)
