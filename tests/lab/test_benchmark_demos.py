"""tools/analysis_tools/benchmark_demos.py: every demo's stock twin builds with the backbone (or
attention) it names, and a short run of one pair writes both sides' alternating runs, their medians
and the table the docs render into its record."""
import argparse
import json

import pytest

from lab.bench.demo_fps import PAIRS, parse_args, table
from mmvisattn.launch import add_config_arguments, load_config
from mmvisattn.registry import build_from_config

from ..conftest import REPO, run_tool

TWIN_PARTS = {'SMCA-Ripple': 'SoftmaxAttention', 'ViL': 'ResNet',
              'Segformer-RWGKA': 'MixVisionTransformer',
              'Castling': 'MixVisionTransformer', 'PicoDet-Castling': 'ESNet', 'PerViT': 'ResNet'}


def built(config: str, options) -> object:
    """The model of ``config`` with ``options`` as benchmark_demos.py passes them to
    benchmark.py."""
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(['--cfg-new-keys', '--cfg-options', *options] if options else [])
    return build_from_config(load_config(str(REPO / 'configs' / config), args.cfg_options,
                                         new_keys=args.cfg_new_keys))


@pytest.mark.parametrize('name', PAIRS)
def test_the_stock_twin_builds_what_it_names(name):
    pair = PAIRS[name]
    model = built(pair.stock, pair.stock_options)
    assert TWIN_PARTS[name] in {type(module).__name__ for module in model.modules()}
    demo = built(pair.demo, pair.demo_options)
    assert type(demo).__name__ == type(model).__name__  # the same detector or segmentor around it


def test_a_pair_is_measured_in_alternating_rounds(workspace, tmp_path):
    run_tool(['tools/analysis_tools/benchmark_demos.py', '--pairs', 'ViL', '--max-iter', '2',
              '--num-warmup', '1',
              '--rounds', '2', '--out-dir', tmp_path / 'out', '--record-dir', tmp_path / 'records'],
             cwd=workspace, timeout=600)
    record = json.loads((tmp_path / 'out' / 'record_bench_demos.json').read_text())
    assert (tmp_path / 'records' / record['name']).is_file()
    row = record['results']['pairs']['ViL']
    assert (
        len(row['demo_runs']) == len(row['stock_runs']) == 2
        and min(row['demo_runs'] + row['stock_runs']) > 0
    )
    assert sorted((tmp_path / 'out' / 'ViL').iterdir()) == [
        tmp_path / 'out' / 'ViL' / f'{side}_{i}' for side in ('demo', 'stock') for i in (0, 1)
    ]
    assert (
        f'| ViL (`retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py`) | {row["demo_fps"]:.2f} '
        '| RetinaNet R-18 |'
        in table(record['results'])
    )


@pytest.mark.parametrize('option, value, least',
                         [('--max-iter', 0, 1), ('--num-warmup', -1, 0), ('--rounds', 0, 1)])
def test_counts_below_their_least_are_one_line(capsys, option, value, least):
    with pytest.raises(SystemExit):
        parse_args([option, str(value)])
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(f'{option} must be at least {least}, got {value}')
    )
