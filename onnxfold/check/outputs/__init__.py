"""The comparison of the two models' outputs on the check's input sets: the reference's runs,
the optimized model's, and what ties their interfaces together."""
