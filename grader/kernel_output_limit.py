"""Loaded inside the grading sandbox (grader/sandbox.py): a cap on what a kernel outputs.

IPython's kernel forwards every write to stdout and stderr, and every rich output (`display`,
a cell's result: images, HTML), to the grader, so one loop could fill the grader's memory and
the graded notebook. After LLM_SANDBOX_OUTPUT_CHARS characters in all (16 Mi by default;
a rich output counts the characters of all its formats, base64 images included), nothing more
is forwarded, and the kernel says so once. Printed text goes through the stream class
`--IPKernelApp.outstream_class=kernel_output_limit.LimitedOutStream`; rich outputs through
the extension `--IPKernelApp.extensions=kernel_output_limit`.
"""

from __future__ import annotations

import json
import os

from ipykernel.iostream import OutStream

from course_lib.grading_env import (  # course_lib is mounted beside this module
    OUTPUT_CUT,
    OUTPUT_LIMIT_ENV,
)

LIMIT = int(os.environ[OUTPUT_LIMIT_ENV])  # set by the sandbox (grader/sandbox.py LIMITS)
NOTICE = f"\n{OUTPUT_CUT} after {LIMIT:,} characters]\n"


class _Budget:
    sent = 0  # stdout, stderr and rich outputs together
    told = False

    @classmethod
    def room(cls) -> int:
        return LIMIT - cls.sent

    @classmethod
    def spend(cls, n: int) -> bool:
        """Whether `n` more characters may go out; once the budget is spent, False."""
        if n > cls.room():
            cls.sent = LIMIT
            return False
        cls.sent += n
        return True

    @classmethod
    def notice_once(cls) -> str:
        if cls.told:
            return ""
        cls.told = True
        return NOTICE


class LimitedOutStream(OutStream):
    def write(self, string):
        if not isinstance(string, str):
            return super().write(string)  # raises the usual TypeError
        room = _Budget.room()
        if len(string) <= room:
            _Budget.spend(len(string))
            return super().write(string)
        _Budget.spend(len(string))
        notice = _Budget.notice_once()
        if room > 0 or notice:
            super().write(string[:max(room, 0)] + notice)
        return len(string)


def _size(data) -> int:
    return sum(len(v) if isinstance(v, str) else len(json.dumps(v, default=str)) for v in (data or {}).values())


def load_ipython_extension(ip) -> None:
    publish = ip.display_pub.publish
    write_format_data = ip.displayhook.write_format_data

    def limited_publish(data, metadata=None, *args, **kwargs):
        if _Budget.spend(_size(data)):
            return publish(data, metadata, *args, **kwargs)
        notice = _Budget.notice_once()
        if notice:
            return publish({"text/plain": notice}, {}, *args, **kwargs)
        return None

    def limited_write_format_data(format_dict, md_dict=None):
        if _Budget.spend(_size(format_dict)):
            return write_format_data(format_dict, md_dict)
        return write_format_data({"text/plain": _Budget.notice_once() or OUTPUT_CUT + "]"}, {})

    ip.display_pub.publish = limited_publish
    ip.displayhook.write_format_data = limited_write_format_data
