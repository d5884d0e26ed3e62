"""What a user runs: the command line, batches and their jobs, comparison, inspection, conformance,
verification, simplify.
"""
