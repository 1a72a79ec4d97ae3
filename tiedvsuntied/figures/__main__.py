import sys

from tiedvsuntied.figures import main

sys.exit(main())
