"""rlkernels' generator: operator specs → contract-checked, per-platform kernel packages."""
