"""Reference implementations for *LLM internals from scratch*.

One module per concept; lesson k imports only from the modules of lessons <= k plus the shared
modules (`data`, `device`, `grading`, `viz`).
"""

__version__ = "0.1.0"
