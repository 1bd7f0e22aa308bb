"""Puts the shared helpers of the algorithm tests (``sampler_helpers``, ``vi_helpers``,
``toy_method``) on the import path of the tests in the family folders below."""
