"""``sgl_kernel.speculative``: the tree op SGLang's NGRAM worker imports from here."""

from ._tree import reconstruct_indices_from_tree_mask

__all__ = ["reconstruct_indices_from_tree_mask"]


def __getattr__(name: str):
    from . import _missing

    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("sgl_kernel.speculative", name)
