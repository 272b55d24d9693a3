"""``python -m monitor.simulate ...`` = ``specwatch simulate ...``."""

from monitor.simulate.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
