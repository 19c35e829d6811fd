"""Whole models in training, each project model beside the stock model it replaces (``make
bench-models``): what a user pays at model level, and the largest input each trains at on a GPU.

The tool's logic: :mod:`lab.bench.models`."""
from lab.bench.models import main

if __name__ == '__main__':
    main()
