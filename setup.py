"""Packaging for mmvisattn. The pinned stack itself is installed by `make install`
(tools/install.sh), because mmcv must be compiled against the local torch first.

The wheel carries the library alone (``mmvisattn/``, with the ops' C++ sources) and, under
``mmvisattn/.mim/``, the configs, the tools, ``model-index.yml`` and the demo, as OpenMMLab's
packages ship them for ``mim`` and for users who never clone; the repository's lab (``lab/`` and the
tools that front it) stays out."""
import ast
import re
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
# what mim finds under <package>/.mim/ (the layout of OpenMMLab's packages)
SHIPPED = ('model-index.yml', 'configs', 'tools', 'demo')
# tools/ scripts only a checkout runs: the install itself
CHECKOUT_TOOLS = ('install.sh',)


def read_version() -> str:
    text = (ROOT / 'mmvisattn' / 'version.py').read_text()
    return re.search(r"__version__ = '([^']+)'", text).group(1)


def add_mim_extension() -> None:
    """``mmvisattn/.mim/`` links to the configs, tools and ``model-index.yml``, for the editable
    install of ``make install``, where they are the checkout's own (a wheel's build copies
    them: :class:`BuildPy`)."""
    mim_dir = ROOT / 'mmvisattn' / '.mim'
    mim_dir.mkdir(exist_ok=True)
    for name in SHIPPED:
        link = mim_dir / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path('..', '..', name))


def fronts_the_lab(path: Path) -> bool:
    """Whether a tool is a front door of the repository's lab (it imports ``lab``), or the
    install."""
    if path.name in CHECKOUT_TOOLS:
        return True
    if path.suffix != '.py':
        return False
    for node in ast.walk(ast.parse(path.read_text())):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ''] if isinstance(node, ast.ImportFrom) else []
        if any(name.split('.')[0] == 'lab' for name in names):
            return True
    return False


class BuildPy(build_py):
    """Copies the shipped folders into the build's ``mmvisattn/.mim/`` (as OpenMMLab's setup.py does
    for a non-editable install); an editable install keeps the links
    of :func:`add_mim_extension`."""

    def run(self) -> None:
        super().run()
        if getattr(self, 'editable_mode', False):
            return
        target = Path(self.build_lib) / 'mmvisattn' / '.mim'
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in SHIPPED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=self.left_out)
            else:
                shutil.copy2(source, target / name)

    @staticmethod
    def left_out(folder: str, names: list) -> list:
        return [name for name in names if name == '__pycache__' or name.endswith('.pyc')
                or (Path(folder).resolve().is_relative_to((ROOT / 'tools').resolve())
                    and (Path(folder) / name).is_file() and fronts_the_lab(Path(folder) / name))]


def read_requirements(name: str) -> list:
    lines = (ROOT / 'requirements' / name).read_text().splitlines()
    return [line.split('#')[0].strip() for line in lines if line.split('#')[0].strip()]


add_mim_extension()
setup(
    name='mmvisattn', version=read_version(),
    description='Efficient vision attention for the OpenMMLab detection and segmentation stack',
    long_description=(ROOT / 'README.md').read_text() if (ROOT / 'README.md').exists() else '',
    long_description_content_type='text/markdown', python_requires='>=3.10',
    packages=find_packages(include=['mmvisattn', 'mmvisattn.*']),
    # the C++ CPU kernels, compiled on first use (mmvisattn/ops/utils/cpu_extension.py)
    package_data={'mmvisattn.ops': ['*/cpu.cpp'], 'mmvisattn.ops.utils': ['cpu_kernels.h']},
    cmdclass={'build_py': BuildPy},
    install_requires=read_requirements('runtime.txt'),
    extras_require={'tests': read_requirements('tests.txt'),
                    'deploy': read_requirements('deploy.txt')},
    license='Apache-2.0',
)
