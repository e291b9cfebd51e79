"""The course's one vocabulary for a model's sizes, and the older parameter names the public API
still accepts.

Code and lessons say `n_embd` (d_model in the papers' math), `n_head`, `n_kv_head`, `n_layer` and
`head_size`. The public API in COURSE_DESIGN.md, a contract for tests outside the notebooks, names
some parameters d_model, n_heads, n_kv_heads, n_layers and d_head: `accepts_older_names` lets a
caller pass those by keyword. Nothing in the course passes them, and no object answers to them."""

from __future__ import annotations

import functools
import inspect

OLDER_NAMES = {"d_model": "n_embd", "n_heads": "n_head", "n_kv_heads": "n_kv_head", "n_layers": "n_layer",
               "d_head": "head_size"}


def accepts_older_names(fn):
    """A keyword argument under an older name (d_model) reaches its new name (n_embd), for each older
    name whose new name is one of fn's parameters. Passing both names is an error."""
    renames = {old: new for old, new in OLDER_NAMES.items() if new in inspect.signature(fn).parameters}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        for old, new in renames.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{fn.__qualname__} got both {old}= and {new}=, two names for one "
                                    f"thing: pass only {new}= (the course's name).")
                kwargs[new] = kwargs.pop(old)
        return fn(*args, **kwargs)

    return call
