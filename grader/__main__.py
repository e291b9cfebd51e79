"""`python -m grader VERB ...`: see grader/__init__.py."""

from __future__ import annotations

import sys

VERBS = {
    "autograde": "grader.autograde",
    "merge": "grader.merge",
    "feedback": "grader.feedback",
    "reference": "grader.reference",
    "check": "grader.precheck",
    "flags": "grader.flags",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in VERBS:
        import grader

        print(grader.__doc__.split("\n\n")[1] if argv[:1] in ([], ["-h"], ["--help"]) else
              f"unknown verb {argv[0]!r}: use one of {', '.join(VERBS)}", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    import importlib

    module = importlib.import_module(VERBS[argv[0]])
    sys.argv = [f"python -m grader {argv[0]}", *argv[1:]]
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
