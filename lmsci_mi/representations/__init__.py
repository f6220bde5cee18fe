"""Linear representations: concept directions under the causal inner product (Park et al., ICML
2024) and representation reading (Zou et al. 2023).

Steering with these directions (activation addition) lives in :mod:`lmsci_mi.steering`.
"""

__all__: list[str] = []
