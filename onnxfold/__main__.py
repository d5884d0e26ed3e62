import sys

from onnxfold.cli import main

sys.exit(main())
