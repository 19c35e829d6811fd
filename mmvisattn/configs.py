"""The configs the package ships, for configs and tools of one's own outside a checkout.

The wheel carries configs, tools and ``model-index.yml`` under ``mmvisattn/.mim/``, where ``mim``
finds them. mmengine 0.10 resolves ``package::`` bases only for OpenMMLab's packages, so a config of
one's own starts from ours by file:

    python -m mmvisattn.configs list [PATTERN]                     # the shipped model configs
    python -m mmvisattn.configs path vil/retinanet_vil-small_fpn_1x_coco.py
    python -m mmvisattn.configs copy vil/retinanet_vil-small_fpn_1x_coco.py my_configs/

``path`` prints the file to name in ``_base_``; ``copy`` writes the config with its bases merged (as
``mim download`` does)."""
import argparse
import fnmatch
import sys
from pathlib import Path
from typing import List, Optional

SHIPPED = Path(__file__).resolve().parent / '.mim'
CONFIGS = SHIPPED / 'configs'
NOT_MODELS = ('_base_', '_deploy_')  # bases and mmdeploy's deploy configs


def model_configs() -> List[str]:
    """Every shipped model config, relative to the configs folder
    (``vil/retinanet_vil-small_fpn_1x_coco.py``)."""
    return sorted(str(path.relative_to(CONFIGS)) for path in CONFIGS.rglob('*.py')
                  if not set(NOT_MODELS) & set(path.relative_to(CONFIGS).parts))


def config_file(name: str) -> Path:
    """The file of config ``name``: the file itself, else the shipped config of that name (with or
    without ``configs/``); one line where there is none."""
    if Path(name).is_file():
        return Path(name)
    relative = (
        Path(name).relative_to('configs') if Path(name).parts[:1] == ('configs',) else Path(name)
    )
    path = CONFIGS / relative
    if not path.is_file():
        raise FileNotFoundError(f'{name}: neither a file nor one of the configs mmvisattn ships '
                                f'(in {CONFIGS}; `python -m mmvisattn.configs list` names them)')
    return path


def copy_config(name: str, dest: Path) -> Path:
    """The config ``name`` with its bases merged, written into the folder ``dest`` under its own
    file name; the path written (an existing file is replaced only by the same config)."""
    from mmengine.config import Config
    source = config_file(name)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / source.name
    text = Config.fromfile(str(source)).pretty_text
    if path.exists() and path.read_text() != text:
        raise FileExistsError(f'{path} exists and is not a copy of {name}; remove it or copy '
                              'elsewhere')
    path.write_text(text)
    return path


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog='python -m mmvisattn.configs',
                                     description=__doc__.split('\n\n')[0])
    commands = parser.add_subparsers(dest='command', required=True)
    listing = commands.add_parser('list', help='the shipped model configs')
    listing.add_argument('pattern', nargs='?', default='*', help="a shell pattern, e.g. 'vil/*'")
    commands.add_parser('path', help='the file of a shipped config').add_argument('name')
    copying = commands.add_parser(
        'copy', help='a self-contained copy of a shipped config, its bases merged'
    )
    copying.add_argument('name')
    copying.add_argument('dest', type=Path, help='the folder to write it into')
    args = parser.parse_args(argv)
    try:
        if args.command == 'list':
            print('\n'.join(name for name in model_configs()
                            if fnmatch.fnmatch(name, args.pattern)))
        elif args.command == 'path':
            print(config_file(args.name))
        else:
            print(copy_config(args.name, args.dest))
    except (FileNotFoundError, FileExistsError) as error:
        sys.exit(f'error: {error.args[0]}')


if __name__ == '__main__':
    main()
