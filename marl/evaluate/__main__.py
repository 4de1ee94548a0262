import sys

from marl.evaluate.cli import main

sys.exit(main())
