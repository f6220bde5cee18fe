"""The tour that the unit tests run on toy models: the steps that take seconds there (``--quick``
also runs ROME, the CFG probes and the steer, which train or load artefacts: too slow for a unit
test, and the slow tests and the README's command cover them on the real model)."""

FAST_STEPS = "predictions,attention_summary,causal_trace,patching,induction"
FAST_TOUR = ["tour", "--steps", FAST_STEPS]
