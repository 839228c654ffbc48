"""codesign: provably optimal hardware/schedule co-design for distributed LLM inference."""

__version__ = "0.1.0"
