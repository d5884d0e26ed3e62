"""``python -m bench``: the benchmark runner (``bench.run``)."""

import sys

from bench.run import main

sys.exit(main())
