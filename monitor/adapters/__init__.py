"""Engine request outputs (vLLM, SGLang, TensorRT-LLM) to telemetry v1 events.

Each engine module has a pure ``to_event(raw, defaults) -> dict`` that raises
``AdapterError`` naming the missing or invalid field; ``adapt_lines`` runs one over JSON lines,
dead-letters what cannot be adapted and counts both. ``specwatch adapt`` is the command.
"""

from monitor.adapters import sglang, trtllm, vllm
from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.defaults import Defaults, MappingError, load_mapping
from monitor.adapters.driver import AdaptSummary, ToEvent, adapt_lines

__all__ = [
    "ADAPTERS",
    "NOTE_KEY",
    "AdaptSummary",
    "AdapterError",
    "Defaults",
    "MappingError",
    "ToEvent",
    "adapt_lines",
    "load_mapping",
]

# --from names -> adapters
ADAPTERS: dict[str, ToEvent] = {
    vllm.ENGINE: vllm.to_event,
    sglang.ENGINE: sglang.to_event,
    trtllm.ENGINE: trtllm.to_event,
}
