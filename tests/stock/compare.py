"""OpenMMLab's own test suites, run plain and with mmvisattn imported, compared test by test.

``import mmvisattn`` must leave the stock stack as it was: every stock test that passes plain passes
with the package imported before collection (:mod:`plugin`). Each suite of ``../shared/stock_tests``
(the releases the project pins) is copied out first (the tests write beside themselves), then run in
both passes on the same test paths. A test that passed plain and not with mmvisattn (failed,
errored, skipped or missing) is a regression, named with its error's last lines; tests that fail in
both passes (this torch or numpy, downloads) are listed, not hidden.

The plain pass depends on the stock tests and the installed stack only, not on the project, so its
outcomes are kept in ``plain_baseline.json`` beside this file under a key of both
(:func:`suite_key`: the suite's files, its test paths, Python's and the packages' versions). With
``--baseline`` a suite whose key matches runs with mmvisattn imported only, and is compared with the
kept outcomes; a regression found so is confirmed by the suite's plain pass run then (a stale
baseline cannot make one). ``--write-baseline`` keeps the outcomes of the plain passes run
(``make test-stock`` does).

    python tests/stock/compare.py [--stock-dir ../shared/stock_tests] [--suites mmengine mmdet ...]
                                  [--jobs 2] [--out-dir work_dirs/stock_tests] [--baseline |
                                  --write-baseline]

Exits 1 on a regression and 2 on a pass that did not finish; writes ``record.json`` into the out
dir.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PASSES = ('plain', 'mmvisattn')
PASS_TIMEOUT = 900
BASELINE = HERE / 'plain_baseline.json'
# what the plain pass runs on besides the stock tests: their key holds these packages' versions
STACK = ('torch', 'numpy', 'mmcv', 'mmengine', 'mmdet', 'mmsegmentation', 'mmpretrain', 'pytest')

# Per suite, the slowest first: the test paths of each library's release (relative to its copy), and
# the slowest tests left out (node id prefixes) to keep both passes of all five suites within a few
# minutes on 2 cores; each of those has faster tests of the same class beside it. The subsets cover
# what the project's patches and registrations touch (configs, checkpoints, the Runner and its
# hooks, logging, registries, FLOP analysis, mmcv's bricks and the ops it wraps) and what its
# configs build on (backbones, necks, heads, detectors, datasets).
SUITES: Dict[str, dict] = {
    'mmdet': dict(paths=['tests/test_models/test_backbones', 'tests/test_models/test_necks',
                         'tests/test_models/test_layers', 'tests/test_models/test_dense_heads',
                         'tests/test_models/test_roi_heads',
                         'tests/test_models/test_detectors/test_single_stage.py',
                         'tests/test_models/test_detectors/test_two_stage.py',
                         'tests/test_models/test_detectors/test_detr.py',
                         'tests/test_models/test_detectors/test_conditional_detr.py',
                         'tests/test_models/test_detectors/test_deformable_detr.py',
                         'tests/test_models/test_detectors/test_maskformer.py',
                         'tests/test_datasets/test_coco.py'],
                  # Mask2Former's loss (its predict and tensor modes and MaskFormer's loss stay)
                  deselect=[
                      'tests/test_models/test_detectors/test_maskformer.py::TestMask2Former::test_forward_loss_mode',
                      'tests/test_models/test_dense_heads/test_reppoints_head.py::TestRepPointsHead::test_head_loss',
                      'tests/test_models/test_backbones/test_regnet.py::test_regnet_backbone[regnetx_12gf',
                      'tests/test_models/test_backbones/test_regnet.py::test_regnet_backbone[regnetx_8.0gf'],
                  configs=True),
    'mmseg': dict(paths=['tests/test_models/test_backbones', 'tests/test_models/test_heads',
                         'tests/test_datasets/test_loading.py'],
                  # ViT variants; test_vit.py stays
                  deselect=['tests/test_models/test_backbones/test_beit.py',
                            'tests/test_models/test_backbones/test_mae.py']),
    'mmpretrain': dict(paths=['tests/test_models/test_classifiers.py',
                              'tests/test_models/test_heads.py',
                              'tests/test_models/test_losses.py', 'tests/test_models/test_utils',
                              'tests/test_models/test_backbones/test_vision_transformer.py',
                              'tests/test_models/test_backbones/test_deit.py',
                              'tests/test_models/test_backbones/test_resnet.py',
                              'tests/test_datasets/test_transforms', 'tests/test_engine'],
                       deselect=[  # the ViT-B forwards (its structure test and DeiT's forward stay)
                           'tests/test_models/test_backbones/test_vision_transformer.py::TestVisionTransformer::'
                           'test_forward',
                           'tests/test_models/test_backbones/test_vision_transformer.py::TestVisionTransformer::'
                           'test_init_weights']),
    'mmengine': dict(paths=['tests/test_config', 'tests/test_runner/test_checkpoint.py',
                            'tests/test_runner/test_runner.py', 'tests/test_hooks',
                            'tests/test_logging', 'tests/test_registry', 'tests/test_analysis']),
    'mmcv': dict(paths=['tests/test_cnn', 'tests/test_ops/test_nms.py',
                        'tests/test_ops/test_roi_align.py']),
}

Outcome = Tuple[str, str]  # ('passed' | 'failed' | 'error' | 'skipped', the message's last lines)
FAILED = ('failed', 'error')
# JUnit's element of a test case that did not pass, and its outcome, the first found in this order
JUNIT_OUTCOMES = (('failure', 'failed'), ('error', 'error'), ('skipped', 'skipped'))


def copy_suite(stock_dir: Path, name: str, scratch: Path) -> Path:
    """The suite's folders under ``scratch/name``, with an empty ``pytest.ini`` there so that pytest
    takes that folder as its root (and reads no configuration of a folder above)."""
    target = scratch / name
    shutil.copytree(stock_dir / name, target, symlinks=True)
    (target / 'pytest.ini').write_text('[pytest]\n')
    return target


def run_pass(suite: str, mode: str, folder: Path, junit: Path, threads: int) -> dict:
    """One pass of one suite; returns its wall time, exit status and the last lines it printed."""
    env = dict(os.environ, MMVISATTN_STOCK_PASS=mode, PYTHONPATH=str(HERE),
               OMP_NUM_THREADS=str(threads), PYTHONDONTWRITEBYTECODE='1')
    env.pop('PYTEST_XDIST_WORKER', None)
    env.pop('PYTEST_XDIST_WORKER_COUNT', None)
    if SUITES[suite].get('configs'):
        env['MMVISATTN_STOCK_CONFIGS'] = str(folder / 'configs')
    deselect = [f'--deselect={prefix}' for prefix in SUITES[suite].get('deselect', ())]
    command = [sys.executable, '-m', 'pytest', *SUITES[suite]['paths'], *deselect, '-p', 'plugin',
               '-p', 'no:cacheprovider', '-q', '--no-header', '-o', 'addopts=',
               '--continue-on-collection-errors', f'--junitxml={junit}']
    start = time.time()
    try:
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                              timeout=PASS_TIMEOUT)
        returncode, tail = done.returncode, (done.stdout + done.stderr).strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        returncode, tail = None, [f'did not finish in {PASS_TIMEOUT} s']
    return dict(seconds=round(time.time() - start, 1), returncode=returncode, tail=tail)


def last_lines(text: str, count: int = 3) -> str:
    return ' | '.join(line.strip() for line in (text or '').strip().splitlines()[-count:]
                      if line.strip())


def read_junit(path: Path) -> Dict[str, Outcome]:
    """Each test case of pytest's JUnit XML report by its id (``class path::name``) with its
    outcome."""
    outcomes = {}
    if not path.is_file():
        return outcomes
    for case in ElementTree.parse(path).getroot().iter('testcase'):
        found = next(((outcome, element) for tag, outcome in JUNIT_OUTCOMES
                      if (element := case.find(tag)) is not None), None)
        outcomes[f'{case.get("classname")}::{case.get("name")}'] = (
            (found[0], last_lines(found[1].text) or found[1].get('message', '')) if found
            else ('passed', ''))
    return outcomes


def counts(outcomes: Dict[str, Outcome]) -> Dict[str, int]:
    kinds = ('passed', 'failed', 'error', 'skipped')
    return {kind: sum(outcome == kind for outcome, _ in outcomes.values()) for kind in kinds}


def compare(plain: Dict[str, Outcome], patched: Dict[str, Outcome]) -> Dict[str, List[dict]]:
    """The regressions (passed plain, not with mmvisattn), the tests that fail in both passes and
    those that pass with mmvisattn only (the defects its fixes fix)."""
    found: Dict[str, List[dict]] = dict(regressions=[], failing_in_both=[], fixed_by_mmvisattn=[])
    for test_id, (outcome, message) in sorted(plain.items()):
        other, other_message = patched.get(test_id, ('missing', 'not run with mmvisattn imported'))
        if outcome == 'passed' and other != 'passed':
            found['regressions'].append(dict(test=test_id, outcome=other, error=other_message))
        elif outcome in FAILED and other in FAILED:
            found['failing_in_both'].append(dict(test=test_id, error=message))
        elif outcome in FAILED and other == 'passed':
            found['fixed_by_mmvisattn'].append(dict(test=test_id, error=message))
    return found


def suite_key(stock_dir: Path, suite: str) -> str:
    """What the plain pass of ``suite`` depends on, hashed: every file of its copy (path and bytes),
    its entry of :data:`SUITES`, Python's version and the versions of :data:`STACK`."""
    digest = hashlib.sha256(json.dumps([SUITES[suite], sys.version_info[:3],
                                        *map(_version, STACK)]).encode())
    root = stock_dir / suite
    for path in sorted(p for p in root.rglob('*') if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b'\0' + path.read_bytes())
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return 'missing'


def run_passes(stock_dir: Path, keys: List[Tuple[str, str]], jobs: int,
               out_dir: Path) -> Dict[Tuple[str, str], dict]:
    """The passes ``keys`` (suite, mode) on ``jobs`` processes, in the order given; each one's run
    (see :func:`run_pass`) with its outcomes."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with tempfile.TemporaryDirectory(prefix='stock_tests_') as scratch:
        folders = {key: copy_suite(stock_dir, key[0], Path(scratch) / key[1]) for key in keys}
        out_dir.mkdir(parents=True, exist_ok=True)
        junit = {key: out_dir / f'{key[0]}-{key[1]}.xml' for key in keys}
        with ThreadPoolExecutor(jobs) as pool:
            runs = {key: pool.submit(run_pass, *key, folders[key], junit[key],
                                     threads) for key in keys}
            return {
                key: dict(future.result(), outcomes=read_junit(junit[key]))
                for key, future in runs.items()
            }


def run_suites(stock_dir: Path, suites: List[str], jobs: int, out_dir: Path,
               baseline: Optional[dict]) -> dict:
    """Every pass of ``suites`` on ``jobs`` processes, the plain ones taken from ``baseline`` where
    its key matches (and run after all where that finds a regression); the record
    of :func:`main`."""
    start = time.time()
    keys = {suite: suite_key(stock_dir, suite) for suite in suites}
    kept = {suite: (baseline or {}).get(suite, {}) for suite in suites}
    kept = {suite: entry for suite, entry in kept.items() if entry.get('key') == keys[suite]}
    # in the order of SUITES (slowest first), passes side by side
    runs = run_passes(stock_dir, [(suite, mode) for suite in suites for mode in PASSES
                                  if not (mode == 'plain' and suite in kept)], jobs, out_dir)
    for suite, entry in kept.items():
        runs[(suite, 'plain')] = dict(
            seconds=0.0,
            returncode=entry['returncode'],
            tail=['kept in the baseline'],
            outcomes={test: tuple(outcome) for test, outcome in entry['outcomes'].items()},
        )
    confirm = [(suite, 'plain') for suite in kept
               if compare(runs[(suite, 'plain')]['outcomes'],
                          runs[(suite, 'mmvisattn')]['outcomes'])['regressions']]
    runs.update(run_passes(stock_dir, confirm, jobs, out_dir) if confirm else {})
    record = dict(seconds=round(time.time() - start, 1), jobs=jobs, suites={})
    for suite in suites:
        plain, patched = (runs[(suite, mode)].pop('outcomes') for mode in PASSES)
        from_baseline = suite in kept and (suite, 'plain') not in confirm
        record['suites'][suite] = dict(
            paths=SUITES[suite]['paths'],
            key=keys[suite],
            plain_from_baseline=from_baseline,
            plain_outcomes=plain,
            **compare(plain, patched),
            **{
                mode: dict(runs[(suite, mode)], **counts(outcomes))
                for mode, outcomes in zip(PASSES, (plain, patched))
            },
        )
    return record


def write_baseline(record: dict, path: Path) -> None:
    """The plain outcomes of the suites whose plain pass ran and finished, under their keys, into
    ``path`` (the other suites' entries stay)."""
    baseline = json.loads(path.read_text()) if path.is_file() else {}
    for suite, entry in record['suites'].items():
        if not entry['plain_from_baseline'] and entry['plain']['returncode'] in (0, 1):
            baseline[suite] = dict(key=entry['key'], returncode=entry['plain']['returncode'],
                                   outcomes=entry['plain_outcomes'])
    path.write_text(json.dumps(baseline, indent=0, sort_keys=True) + '\n')


def unfinished(record: dict) -> List[str]:
    """The passes that ended without a report (pytest's status 0 all passed, 1 some failed)."""
    return [f'{suite} {mode}: exit {entry[mode]["returncode"]}: {" | ".join(entry[mode]["tail"])}'
            for suite, entry in record['suites'].items() for mode in PASSES
            if entry[mode]['returncode'] not in (0, 1)]


def report(record: dict) -> str:
    lines = [f'stock suites, plain | with mmvisattn imported ({record["seconds"]} s on '
             f'{record["jobs"]} processes):']
    for suite, entry in record['suites'].items():
        plain, patched = entry['plain'], entry['mmvisattn']
        kept = ' (plain: the baseline\'s outcomes)' if entry['plain_from_baseline'] else ''
        lines.append(f'  {suite}{kept}: ' + ' | '.join(
            f'{run["passed"]} passed, {run["failed"] + run["error"]} failed, {run["skipped"]} '
            f'skipped ({run["seconds"]} s)' for run in (plain, patched)))
        lines += [
            f'    failing in both: {item["test"]}: {item["error"][:200]}'
            for item in entry['failing_in_both']
        ]
        lines += [f'    passing with mmvisattn only: {item["test"]} (plain: {item["error"][:200]})'
                  for item in entry['fixed_by_mmvisattn']]
        lines += [f'    REGRESSION {item["test"]} ({item["outcome"]} with mmvisattn): '
                  f'{item["error"][:400]}'
                  for item in entry['regressions']]
    return '\n'.join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--stock-dir', type=Path, default=REPO.parent / 'shared/stock_tests')
    parser.add_argument('--suites', nargs='+', choices=sorted(SUITES), default=list(SUITES))
    parser.add_argument('--jobs', type=int, default=2, help='passes run side by side')
    parser.add_argument('--out-dir', type=Path, default=REPO / 'work_dirs/stock_tests')
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument('--baseline', action='store_true',
                      help=f'take the plain outcomes of {BASELINE.name} where its key matches')
    kept.add_argument('--write-baseline', action='store_true',
                      help=f'keep the plain outcomes in {BASELINE.name}')
    args = parser.parse_args()
    missing = [suite for suite in args.suites if not (args.stock_dir / suite / 'tests').is_dir()]
    if missing:
        raise SystemExit(f'error: {args.stock_dir} has no tests/ of {", ".join(missing)}; expected '
                         'the stock suites of ../shared/stock_tests')
    baseline = json.loads(BASELINE.read_text()) if args.baseline and BASELINE.is_file() else None
    # absolute: each pass runs in its copy of the suite, which a relative report path would land in
    args.out_dir = args.out_dir.resolve()
    record = run_suites(args.stock_dir, args.suites, args.jobs, args.out_dir, baseline)
    (args.out_dir / 'record.json').write_text(json.dumps(record, indent=1) + '\n')
    if args.write_baseline:
        write_baseline(record, BASELINE)
    print(report(record))
    broken = unfinished(record)
    for line in broken:
        print(f'  did not finish: {line}')
    regressions = sum(len(entry['regressions']) for entry in record['suites'].values())
    print(f'{regressions} regressions')
    return 2 if broken else int(regressions > 0)


if __name__ == '__main__':
    sys.exit(main())
