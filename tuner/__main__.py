"""`python -m tuner` -> tuner.cli.main()."""

from tuner.cli import main

raise SystemExit(main())
