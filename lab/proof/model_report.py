"""The report of ``gpu_proof_models.py``: its rows as a Markdown table (``models.md``) and as the
rows of its record (:mod:`.records`' ``models`` schema, one per model)."""
from typing import Dict, List


def record_rows(rows: Dict[str, Dict]) -> List[Dict]:
    """The float32 runs (and largest inputs) in the record's schema, one row per model."""
    models: Dict[str, Dict] = {}
    for row in rows.values():
        if row.get('amp') or row.get('skipped'):
            continue
        entry = models.setdefault(row['model'],
                                  dict(model=row['model'], stock=row['stock'], pair=row['pair'],
                                                     step_ms=None, peak_mb=None, test_images_s=None,
                                                     largest_input=None))
        if row['stage'] == 'largest':
            entry['largest_input'] = row.get('largest_input')
        else:
            entry.update(step_ms=row.get('step_ms'), peak_mb=row.get('peak_mb'),
                         test_images_s=row.get('test_images_s'), error=row.get('error'))
    for row in rows.values():
        if row.get('amp') and row['model'] in models:
            models[row['model']].update(amp_step_ms=row.get('step_ms'),
                                        amp_peak_mb=row.get('peak_mb'))
    return list(models.values())


def markdown(gpu: str, rows: Dict[str, Dict], skipped: List[str]) -> str:
    columns = ('model', 'stage', 'amp', 'step_ms', 'peak_mb', 'test_images_s', 'largest_input',
               'checks', 'error')
    lines = [f'# Whole models on {gpu}', '', '| ' + ' | '.join(columns) + ' |',
             '|' + '---|' * len(columns)]
    for row in rows.values():
        cells = []
        for column in columns:
            value = row.get(column)
            if column == 'checks' and value:
                value = ', '.join(
                    f'{k} {"ok" if v else "FAILED" if v is False else "-"}'
                    for k, v in value.items()
                )
            cells.append('-' if value is None else f'{value:.1f}' if isinstance(value, float)
                         else str(value))
        lines.append('| ' + ' | '.join(cells).replace('\n', ' ') + ' |')
    if skipped:
        lines += ['', 'Skipped (out of --budget): ' + '; '.join(skipped)]
    return '\n'.join(lines) + '\n'
