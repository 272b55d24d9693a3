"""specwatch's HTTP API: the rollups, routes, alerts and silences as JSON, plus health,
readiness and Prometheus metrics.

``create_app`` (``monitor/api/app.py``) builds the FastAPI app on a
:class:`~monitor.store.store.Store`; ``ApiServer`` (``monitor/api/server.py``) runs it with
uvicorn in a thread of the daemon, or ``specwatch serve`` (``monitor/api/cli.py``) on its own
against a read replica. This module stays light: the CLI imports it to build its parser.
"""

from monitor.api.exceptions import ApiConfigError

__all__ = ["ApiConfigError"]
