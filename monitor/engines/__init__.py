"""Engine-side helpers: code that runs next to an inference engine and produces telemetry v1.

``transformers_spec`` counts speculative decoding in Hugging Face transformers, which reports
no acceptance itself. It imports torch and transformers only when used, so importing this
package needs neither.
"""
