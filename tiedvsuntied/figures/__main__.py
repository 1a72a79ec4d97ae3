from tiedvsuntied.figures.cli import main

raise SystemExit(main())
