"""Write the golden fixtures of ``tests/data/official/`` from the official implementations.

The tool's logic: :mod:`mmvisattn.benchmarks.official_fixtures`."""
from mmvisattn.benchmarks.official_fixtures import main

if __name__ == '__main__':
    main()
