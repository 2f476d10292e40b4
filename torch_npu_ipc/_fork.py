"""A child made by a plain ``os.fork()`` after the NPU was initialized is refused the NPU.

torch_npu marks such a child only when the fork went through
multiprocessing (``multiprocessing.util.register_after_fork``). After a plain
``os.fork()`` the child believed its NPU worked: the plugin's calls went
through (an ``import_tensor`` used up the descriptor its parent could still
have imported) and the first device operation hung. torch.cuda catches every
fork (``pthread_atfork``). :func:`install` runs torch_npu's own after-fork
step for every fork, so in the child ``torch.npu._lazy_init()``, which the
plugin's entry points call, raises torch_npu's "Cannot re-initialize NPU in
forked subprocess". A child that never touches the NPU is not affected.
"""

from __future__ import annotations

import os

import torch_npu


def _mark_child() -> None:
    after_fork = getattr(torch_npu.npu, "_after_fork", None)
    if after_fork is None:
        return  # a torch_npu without the step: nothing to mark
    # A no-op unless the parent had initialized the NPU. An exception here does
    # not fail the fork: Python reports it on stderr ("Exception ignored").
    after_fork(None)


def install() -> None:
    """Register :func:`_mark_child` to run in every forked child (once, at import)."""
    os.register_at_fork(after_in_child=_mark_child)
