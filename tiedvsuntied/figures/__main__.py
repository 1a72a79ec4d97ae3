import sys

from tiedvsuntied.figures.cli import main

sys.exit(main())
