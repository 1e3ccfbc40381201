"""python -m tools.bench: see tools/bench/__init__.py."""

import sys

from tools.bench.runner import main

if __name__ == "__main__":
    sys.exit(main())
