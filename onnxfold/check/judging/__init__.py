"""The check's judgements: tolerances, bits, the ops held to bits, verdicts, and the
magnitudes of summed terms that widen a tolerance where a sum may round otherwise."""
