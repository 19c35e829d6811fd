"""The report of the side-by-side benchmark (``benchmark_suite.py``): Markdown tables as the docs
render them from a record, and a PNG of time against tokens per op."""
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from lab.bench.suite_cases import MODEL_GROUPS, OP_CASES


def _fmt(value: Optional[float], unit: str = '') -> str:
    if value is None:
        return '-'
    return (f'{value:.2f}x' if unit == 'x' else f'{value:,.0f}{unit}' if value >= 100
            else f'{value:.1f}{unit}')


def _measured(items: Sequence, results: Dict[str, dict]):
    """``(item, its results)`` for the items of ``OP_CASES`` or ``MODEL_GROUPS`` that were run."""
    return [
        (item, results[str(index)]) for index, item in enumerate(items) if str(index) in results
    ]


def op_tables(results: Dict[str, dict]) -> List[str]:
    lines = []
    for case, entry in _measured(OP_CASES, results):
        lines += ['',
                  f'**{case.title}**: {case.dims} dims, {case.heads} heads, batch {case.batch}; '
                  'forward + backward ms (median), ratio ours / peer (median of per-round ratios), '
                  'peak memory growth MB', '']
        timed = [t for t in entry['time'].values() if 'error' not in t]
        labels = list(timed[0]['ms']) if timed else []
        ratios = list(timed[0]['ratio']) if timed else []
        measured = {label for row in entry['memory'].values() for label in row}
        memory_peers = [p for p in case.memory_peers if p in measured]
        memory_labels = [label for label in case.ours if label in measured] + memory_peers
        header = (
            ['grid']
            + [f'{label} ms' for label in labels]
            + ratios
            + [f'{label} MB' for label in memory_labels]
        )
        header += [f'{mine} MB / {peer} MB' for mine in case.ours for peer in memory_peers]
        lines += ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
        for grid in entry['grids']:
            timing = entry['time'].get(str(grid), {})
            memory = entry['memory'].get(str(grid), {})
            if 'error' in timing:
                lines.append(f'| {grid}x{grid} | error: {timing["error"]} |')
                continue
            row = [f'{grid}x{grid}'] + [_fmt(timing.get('ms', {}).get(label)) for label in labels]
            row += [_fmt(timing.get('ratio', {}).get(r), 'x') for r in ratios]
            row += [_fmt(memory.get(label, {}).get('peak_mb')) for label in memory_labels]
            for mine in case.ours:
                for peer in memory_peers:
                    mb, peer_mb = memory.get(mine,
                                             {}).get('peak_mb'), memory.get(peer, {}).get('peak_mb')
                    row.append(_fmt(mb / peer_mb if mb is not None and peer_mb else None, 'x'))
            lines.append('| ' + ' | '.join(row) + ' |')
    return lines


def model_tables(results: Dict[str, dict]) -> List[str]:
    lines = []
    for group, entry in _measured(MODEL_GROUPS, results):
        if 'error' in entry['time']:
            lines += ['', f'**{group.title}**: error: {entry["time"]["error"]}']
            continue
        first = next(iter(group.configs))
        height, width = entry['shape']
        lines += [
            '', f'**{group.title} at {height}x{width}**, one image, inference (raw head '
            'outputs), CPU '
            f'{entry["threads"]} threads; ratios against {first} (median of per-round ratios)', '',
            '| model | whole ms | ratio | backbone ms | ratio | peak memory growth MB |',
            '|---|---|---|---|---|---|',
        ]
        timing = entry['time']
        for label in group.configs:
            backbone = f'{label} backbone'
            lines.append(f'| {label} | {_fmt(timing["ms"][label])} | '
                         f'{_fmt(timing["ratio"][label], "x")} | '
                         f'{_fmt(timing["ms"].get(backbone))} | '
                         f'{_fmt(timing["ratio"].get(backbone), "x")} | '
                         f'{_fmt(entry["memory"].get(label, {}).get("peak_mb"))} |')
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from mmvisattn.analysis.benchmark_attention import log_axes, save_figure
    cases = _measured(OP_CASES, results['ops'])
    figure, axes = plt.subplots(1, max(1, len(cases)), figsize=(4 * max(1, len(cases)), 3.6),
                                squeeze=False)
    for axis, (case, entry) in zip(axes[0], cases):
        for label in list(case.ours) + list(case.peers):
            points = [(g * g, entry['time'][str(g)]['ms'][label]) for g in entry['grids']
                      if label in entry['time'].get(str(g), {}).get('ms', {})]
            if points:
                axis.plot(*zip(*points), marker='o', label=label)
        log_axes(axis, 'forward + backward, ms', title=case.title.split(' (')[0])
        axis.legend(fontsize=7)
    save_figure(figure, path)
