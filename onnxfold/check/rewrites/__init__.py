"""The rewrite validation: each replaced window run against its replacement."""
