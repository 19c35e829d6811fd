"""The side-by-side benchmark of docs/records/benchmarks.md (``make bench``): every attention of the
project beside torch SDPA, mmseg's spatial-reduction attention (SRA) and, given ``--peers``, the
official modules; then whole models end to end.

The tool's logic: :mod:`lab.bench.suite`."""
from lab.bench.suite import main

if __name__ == '__main__':
    main()
