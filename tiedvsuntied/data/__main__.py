import sys

from tiedvsuntied.data import main

sys.exit(main())
