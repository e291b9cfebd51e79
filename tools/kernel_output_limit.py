"""Loaded inside the grading sandbox (tools/sandbox.py): a cap on what a kernel prints.

IPython's kernel forwards every write to stdout and stderr to the grader, so one `print` in a
loop could fill the grader's memory and the graded notebook. This stream class stops
forwarding after LLM_SANDBOX_OUTPUT_CHARS characters (stdout and stderr together, 16 Mi by
default) and says so once. It is passed to the kernel as
`--IPKernelApp.outstream_class=kernel_output_limit.LimitedOutStream`.
"""

from __future__ import annotations

import os

from ipykernel.iostream import OutStream

LIMIT = int(os.environ.get("LLM_SANDBOX_OUTPUT_CHARS", 16 * 2**20))


class LimitedOutStream(OutStream):
    sent = 0  # shared by the kernel's stdout and stderr

    def write(self, string):
        if not isinstance(string, str):
            return super().write(string)  # raises the usual TypeError
        room = LIMIT - LimitedOutStream.sent
        if room <= 0:
            return len(string)
        if len(string) > room:
            LimitedOutStream.sent = LIMIT
            super().write(string[:room] + f"\n[output cut by the grader after {LIMIT:,} characters]\n")
            return len(string)
        LimitedOutStream.sent += len(string)
        return super().write(string)
