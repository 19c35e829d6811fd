"""Where a model's training step spends its time and its saved-for-backward memory, module by
module: the per-module profile behind the explanation in docs/records/models.md of a pair of
``benchmark_models.py`` that is heavier than its stock counterpart.

The tool's logic: :mod:`lab.bench.profile`."""
from lab.bench.profile import main

if __name__ == '__main__':
    main()
