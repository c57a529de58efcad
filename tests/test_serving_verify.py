"""Greedy verification of a drafted tree (`serving.verify.verify_tree`) on hand-built logits:
the longest path whose every token is the target's argmax at its parent, children tried in node
order, and the bonus token the target's argmax where the path ends."""

from __future__ import annotations

import torch

from inspector.serving.verify import verify_tree

V = 10


def logits_of(argmaxes: list[int]) -> torch.Tensor:
    """Logits [len, V] whose row r has its argmax at argmaxes[r] (bf16, as a target may give)."""
    x = torch.zeros(len(argmaxes), V)
    for r, a in enumerate(argmaxes):
        x[r, a] = 1.0 + r  # rows differ, so a row read in place of another shows
    return x.to(torch.bfloat16)


# root -> 0 (tok 5), 1 (tok 7); 0 -> 2 (tok 3), 3 (tok 4); 2 -> 4 (tok 9)
TOKENS, PARENT = [5, 7, 3, 4, 9], [-1, -1, 0, 0, 2]


def test_the_longest_matching_path_and_the_bonus():
    # rows: root, then each node's logits (node j at row j + 1)
    assert verify_tree(logits_of([5, 3, 0, 9, 0, 2]), TOKENS, PARENT) == ([0, 2, 4], 2)
    assert verify_tree(logits_of([5, 4, 0, 0, 8, 0]), TOKENS, PARENT) == ([0, 3], 8)
    assert verify_tree(logits_of([7, 0, 6, 0, 0, 0]), TOKENS, PARENT) == ([1], 6)


def test_nothing_accepted_gives_the_roots_argmax():
    assert verify_tree(logits_of([1, 5, 3, 0, 0, 0]), TOKENS, PARENT) == ([], 1)
    assert verify_tree(logits_of([6]), [], []) == ([], 6)


def test_children_are_tried_in_node_order():
    # two children of the root with the same token: the first in node order is taken
    tokens, parent = [5, 5, 2], [-1, -1, 1]
    assert verify_tree(logits_of([5, 9, 2, 0]), tokens, parent) == ([0], 9)
