from monitor.cli import run

raise SystemExit(run())
