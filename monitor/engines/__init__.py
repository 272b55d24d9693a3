"""Engine-side helpers: code that runs next to an inference engine and produces telemetry v1.

``transformers_spec`` counts speculative decoding in Hugging Face transformers, which reports
no acceptance itself. ``openai_server`` serves such a model over a minimal OpenAI-compatible
HTTP API (greedy; with prompt lookup, without speculation, or with a deliberately broken
verifier) for the live losslessness test. Both import torch and transformers only when used,
so importing this package needs neither.
"""
