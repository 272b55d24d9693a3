"""Engine request outputs (vLLM, SGLang, TensorRT-LLM, llama.cpp) and recorded real-engine
requests to telemetry v1 events.

Each module has a ``to_event(raw, defaults) -> dict`` (pure, except that ``record`` lays out
records without a time back to back within one run) that raises ``AdapterError`` naming the
missing or invalid field; ``adapt_lines`` runs one over JSON lines,
dead-letters what cannot be adapted and counts both. ``specwatch adapt`` is the command.
"""

from monitor.adapters import llamacpp, record, sglang, trtllm, vllm
from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.defaults import Defaults, MappingError, load_mapping
from monitor.adapters.driver import AdaptSummary, ToEvent, adapt_lines

__all__ = [
    "ADAPTERS",
    "SELF_DESCRIBED",
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
    llamacpp.ENGINE: llamacpp.to_event,
    record.ENGINE: record.to_event,
}
# --from names whose input names its own route, models and tokenizers (no flags needed)
SELF_DESCRIBED: frozenset[str] = frozenset({record.ENGINE})
