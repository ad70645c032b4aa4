"""`python -m tuner` -> tuner.cli.main()."""

from tuner.interrupts import INTERRUPTS

INTERRUPTS.install()  # before the heavy imports: a stop asked while they run is recorded, not lost

from tuner.cli import main  # noqa: E402

raise SystemExit(main())
