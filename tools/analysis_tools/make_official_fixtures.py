"""Write the golden fixtures of ``tests/data/official/`` from the official implementations.

The tool's logic: :mod:`lab.official_fixtures`."""
from lab.official_fixtures import main

if __name__ == '__main__':
    main()
