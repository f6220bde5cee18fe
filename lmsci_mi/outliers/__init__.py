"""Attention and outliers (issue 40): massive activations, super weights and sinks; why length
generalisation fails, and LM-Infinite's Λ-shaped mask."""

from lmsci_mi.outliers.lambda_mask import LambdaMask as LambdaMask
from lmsci_mi.outliers.lambda_mask import LambdaMaskConfig as LambdaMaskConfig
from lmsci_mi.outliers.lambda_mask import lambda_mask as lambda_mask
from lmsci_mi.outliers.length import TRAINED_CONTEXT as TRAINED_CONTEXT
from lmsci_mi.outliers.length import AttentionCurvesConfig as AttentionCurvesConfig
from lmsci_mi.outliers.length import AttentionLengthCurves as AttentionLengthCurves
from lmsci_mi.outliers.length import FirstTokenSeparation as FirstTokenSeparation
from lmsci_mi.outliers.length import LengthCurve as LengthCurve
from lmsci_mi.outliers.length import LongText as LongText
from lmsci_mi.outliers.length import NLLByPosition as NLLByPosition
from lmsci_mi.outliers.length import NLLByPositionConfig as NLLByPositionConfig
from lmsci_mi.outliers.length import NLLRise as NLLRise
from lmsci_mi.outliers.length import SeparationConfig as SeparationConfig
from lmsci_mi.outliers.length import TrainedContext as TrainedContext
from lmsci_mi.outliers.length import attention_length_curves as attention_length_curves
from lmsci_mi.outliers.length import first_token_separation as first_token_separation
from lmsci_mi.outliers.length import long_text as long_text
from lmsci_mi.outliers.length import nll_by_position as nll_by_position
from lmsci_mi.outliers.length import nll_rise as nll_rise
from lmsci_mi.outliers.length import trained_context as trained_context

__all__ = [
    # length diagnostics and the Λ-mask (issue 40 items 3-5)
    "TRAINED_CONTEXT",
    "AttentionCurvesConfig",
    "AttentionLengthCurves",
    "FirstTokenSeparation",
    "LambdaMask",
    "LambdaMaskConfig",
    "LengthCurve",
    "LongText",
    "NLLByPosition",
    "NLLByPositionConfig",
    "NLLRise",
    "SeparationConfig",
    "TrainedContext",
    "attention_length_curves",
    "first_token_separation",
    "lambda_mask",
    "long_text",
    "nll_by_position",
    "nll_rise",
    "trained_context",
]
