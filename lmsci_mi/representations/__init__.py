"""Linear representations: concept directions under the causal inner product (Park et al., ICML
2024: the inner product, the concept-vector core and its three checks, one module each) and
representation reading (Zou et al. 2023).

Steering with these directions (activation addition) lives in :mod:`lmsci_mi.steering`.
"""

from lmsci_mi.representations.concepts import ConceptConfig as ConceptConfig
from lmsci_mi.representations.concepts import ConceptDirection as ConceptDirection
from lmsci_mi.representations.concepts import TokenPairs as TokenPairs
from lmsci_mi.representations.concepts import concept_direction as concept_direction
from lmsci_mi.representations.concepts import single_token_pairs as single_token_pairs
from lmsci_mi.representations.inner_product import CausalInnerProduct as CausalInnerProduct
from lmsci_mi.representations.inner_product import (
    CausalInnerProductConfig as CausalInnerProductConfig,
)
from lmsci_mi.representations.inner_product import causal_inner_product as causal_inner_product
from lmsci_mi.representations.inner_product import unembedding_site as unembedding_site
from lmsci_mi.representations.inner_product import unembedding_vectors as unembedding_vectors
from lmsci_mi.representations.intervention import ConceptIntervention as ConceptIntervention
from lmsci_mi.representations.intervention import (
    ConceptInterventionConfig as ConceptInterventionConfig,
)
from lmsci_mi.representations.intervention import concept_intervention as concept_intervention
from lmsci_mi.representations.orthogonality import ConceptInnerProducts as ConceptInnerProducts
from lmsci_mi.representations.orthogonality import (
    concept_inner_products as concept_inner_products,
)
from lmsci_mi.representations.projections import ConceptProjections as ConceptProjections
from lmsci_mi.representations.projections import concept_projections as concept_projections
from lmsci_mi.representations.reading import READING_METHODS as READING_METHODS
from lmsci_mi.representations.reading import READING_SCORES as READING_SCORES
from lmsci_mi.representations.reading import READING_SPLITS as READING_SPLITS
from lmsci_mi.representations.reading import ReadingConfig as ReadingConfig
from lmsci_mi.representations.reading import RepresentationReading as RepresentationReading
from lmsci_mi.representations.reading import pairwise_accuracy as pairwise_accuracy
from lmsci_mi.representations.reading import reading_from_activations as reading_from_activations
from lmsci_mi.representations.reading import reading_vector as reading_vector
from lmsci_mi.representations.reading import representation_reading as representation_reading

__all__: list[str] = [
    "READING_METHODS",
    "READING_SCORES",
    "READING_SPLITS",
    "CausalInnerProduct",
    "CausalInnerProductConfig",
    "ConceptConfig",
    "ConceptDirection",
    "ConceptInnerProducts",
    "ConceptIntervention",
    "ConceptInterventionConfig",
    "ConceptProjections",
    "ReadingConfig",
    "RepresentationReading",
    "TokenPairs",
    "causal_inner_product",
    "concept_direction",
    "concept_inner_products",
    "concept_intervention",
    "concept_projections",
    "pairwise_accuracy",
    "reading_from_activations",
    "reading_vector",
    "representation_reading",
    "single_token_pairs",
    "unembedding_site",
    "unembedding_vectors",
]
